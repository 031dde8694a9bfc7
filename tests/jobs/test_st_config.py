"""bertlite.jobs.st.folders: sentence-transformers folder metadata, read without torch."""

import json
import subprocess
import sys

import numpy as np
import pytest

from bertlite.jobs.st.folders import read_sentence_transformers_settings


def test_reads_the_metadata_without_importing_torch(real_model_path):
    code = (
        "import sys\n"
        "from bertlite.jobs.st.folders import read_sentence_transformers_prompts, read_sentence_transformers_settings\n"
        "s = read_sentence_transformers_settings(sys.argv[1])\n"
        "print(s.pooling, s.normalize, s.max_length, read_sentence_transformers_prompts(sys.argv[1]))\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(real_model_path)], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["['mean'] True 256 ({'query': '', 'document': ''}, None)", "[]"]


def _with_pooling(real_model_path, folder, pooling: dict, prompts: dict | None = None):
    """The real checkpoint's files (linked), with another 1_Pooling/config.json (and prompts)."""
    folder.mkdir()
    for item in real_model_path.iterdir():
        if item.name not in ("1_Pooling", "config_sentence_transformers.json"):
            (folder / item.name).symlink_to(item)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, **pooling}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts or {}}))
    return folder


@pytest.mark.parametrize(
    "pooling",
    [
        {"pooling_mode": ["cls", "mean"]},
        {"pooling_mode": "cls"},  # the last layer computes only [CLS]
        {"pooling_mode": "max"},
        {"pooling_mode": ["mean_sqrt_len_tokens", "max"]},
    ],
    ids=["cls+mean", "cls", "max", "mean_sqrt_len+max"],
)
def test_pooling_modes_by_name_give_sentence_transformers_vectors(pooling, real_model_path, corpus_texts, tmp_path):
    # sentence-transformers 6 writes pooling_mode as a name or a list; a list used to be read as plain mean.
    from sentence_transformers import SentenceTransformer

    from bertlite.jobs.embedder import Embedder

    folder = _with_pooling(real_model_path, tmp_path / "model", pooling)
    texts = [t[:160] for t in corpus_texts[:6]]
    expected = SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    ours = Embedder.from_pretrained(folder, dtype="float32").encode(
        texts
    )  # fp32 references; dtype="auto" is bf16 on a CPU with native bf16
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=0)


def test_unsupported_pooling_names_and_prompt_exclusion_are_refused(real_model_path, tmp_path):
    from bertlite.jobs.embedder import Embedder

    folder = _with_pooling(real_model_path, tmp_path / "weighted", {"pooling_mode": ["mean", "weightedmean"]})
    with pytest.raises(ValueError, match="pooling='weightedmean' is not one of"):
        read_sentence_transformers_settings(folder)
    # include_prompt: false pools without the prompt's tokens: bertlite refuses a prompt rather than differ.
    folder = _with_pooling(
        real_model_path, tmp_path / "instruct", {"pooling_mode": "mean", "include_prompt": False}, {"query": "q: "}
    )
    embedder = Embedder.from_pretrained(folder)
    assert embedder.encode(["no prompt"]).shape == (1, 384)
    with pytest.raises(ValueError, match=r"prompt 'q: ': this model's pooling leaves the prompt's tokens out"):
        embedder.encode(["a query"], prompt_name="query")


def test_a_folder_saved_by_sentence_transformers_6_keeps_its_max_length(real_model_path, tmp_path):
    # sentence-transformers 5+ writes max_seq_length into tokenizer_config.json's model_max_length, not
    # sentence_bert_config.json: read only there, long texts were cut at 512 tokens instead of 40.
    from sentence_transformers import SentenceTransformer

    from bertlite.jobs.embedder import Embedder

    st = SentenceTransformer(str(real_model_path), device="cpu")
    st.max_seq_length = 40
    st.save(str(tmp_path / "saved"))
    assert "max_seq_length" not in json.loads((tmp_path / "saved" / "sentence_bert_config.json").read_text())
    texts = ["a long text about lists and tuples " * 20, "short"]
    ours = Embedder.from_pretrained(tmp_path / "saved", dtype="float32")
    assert ours.max_length == 40
    np.testing.assert_allclose(
        ours.encode(texts), SentenceTransformer(str(tmp_path / "saved")).encode(texts), atol=1e-5
    )
