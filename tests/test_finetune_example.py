"""scripts/finetune_example.py end to end in a few steps: it trains, saves, and
transformers reloads the folder with the same logits."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "finetune_example.py"


@pytest.fixture(scope="module")
def finetune():
    spec = importlib.util.spec_from_file_location("finetune_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_labels_come_from_the_rule_and_the_keyword_is_gone(finetune):
    examples = finetune.make_examples(finetune.CORPUS)
    positives = sum(label for _, label in examples)
    assert 0.1 < positives / len(examples) < 0.5  # a real minority class, not a trivial task
    assert not any(finetune.KEYWORD.search(text) for text, _ in examples)


def test_short_run_saves_a_checkpoint_transformers_reloads_exactly(finetune, tmp_path, recwarn):
    result = finetune.main(["--steps", "3", "--batch-size", "4", "--held-out", "16", "--output", str(tmp_path / "out")])
    assert (tmp_path / "out" / "config.json").is_file() and (tmp_path / "out" / "model.safetensors").is_file()
    assert result["transformers_class"] == "BertForSequenceClassification"
    assert result["max_abs_diff_transformers_reload"] < 1e-5
    assert result["max_abs_diff_bertlite_reload"] == 0.0
    assert result["id2label"] == {0: "no_return_value", 1: "describes_return_value"}
    # the classifier is new: loading the base checkpoint says so
    assert any("classifier.weight" in str(w.message) for w in recwarn)
