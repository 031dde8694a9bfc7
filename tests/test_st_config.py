"""bertlite.st_config: sentence-transformers folder metadata, read without torch."""

import subprocess
import sys

import bertlite.features
import bertlite.st_config


def test_reads_the_metadata_without_importing_torch(real_model_path):
    code = (
        "import sys\n"
        "from bertlite.st_config import read_sentence_transformers_prompts, read_sentence_transformers_settings\n"
        "s = read_sentence_transformers_settings(sys.argv[1])\n"
        "print(s.pooling, s.normalize, s.max_length, read_sentence_transformers_prompts(sys.argv[1]))\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(real_model_path)], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["['mean'] True 256 ({'query': '', 'document': ''}, None)", "[]"]


def test_old_names_in_features_are_the_same_objects():
    for name in (
        "POOLING_MODES",
        "DEFAULT_POOLING",
        "DEFAULT_NORMALIZE",
        "SentenceTransformerSettings",
        "read_sentence_transformers_settings",
        "read_sentence_transformers_prompts",
    ):
        assert getattr(bertlite.features, name) is getattr(bertlite.st_config, name), name
