"""scripts/finetune_example.py end to end in a few steps: it trains, saves, and
transformers reloads the folder with the same logits.

The script runs as a user runs it, in its own interpreter: a test never imports a script."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # the script in its own interpreter

SCRIPTS = ROOT / "scripts"
SCRIPT = SCRIPTS / "finetune_example.py"

# The script's own rule, asked of the script by name (scripts/ on the child's path, not this one's).
RULE_CHECK = """
import json
import finetune_example as finetune
examples = finetune.make_examples(finetune.CORPUS)
print(json.dumps({
    "positives": sum(label for _, label in examples),
    "examples": len(examples),
    "with_keyword": sum(bool(finetune.KEYWORD.search(text)) for text, _ in examples),
}))
"""


def run_python(*args: str, extra_path: str = "") -> subprocess.CompletedProcess[str]:
    path = [extra_path, str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(filter(None, path))}
    result = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def test_labels_come_from_the_rule_and_the_keyword_is_gone():
    counts = json.loads(run_python("-c", RULE_CHECK, extra_path=str(SCRIPTS)).stdout)
    assert 0.1 < counts["positives"] / counts["examples"] < 0.5  # a real minority class, not a trivial task
    assert counts["with_keyword"] == 0


def test_short_run_saves_a_checkpoint_transformers_reloads_exactly(tmp_path):
    out = tmp_path / "out"
    done = run_python(str(SCRIPT), "--steps", "3", "--batch-size", "4", "--held-out", "16", "--output", str(out))
    result = json.loads(done.stdout.splitlines()[-1])
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert result["transformers_class"] == "BertForSequenceClassification"
    assert result["max_abs_diff_transformers_reload"] < 1e-5
    assert result["max_abs_diff_bertlite_reload"] == 0.0
    assert result["id2label"] == {"0": "no_return_value", "1": "describes_return_value"}  # JSON keys are strings
    # the classifier is new: loading the base checkpoint says so
    assert "classifier.weight" in done.stderr
