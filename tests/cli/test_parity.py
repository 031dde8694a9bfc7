"""`bertlite parity` end to end, in process (main(argv) -> exit code)."""

import json
import shutil

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import bertlite
import bertlite.layers.activations
from bertlite.cli import main
from bertlite.parity import BUILTIN_TEXTS, HEAD_LOGITS, check
from tests.helpers import DAMAGED_TOKENIZERS, damaged_tokenizer_folder

LAYER3 = "encoder.layer.3.intermediate.dense.weight"


@pytest.fixture(scope="module")
def perturbed(real_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("perturbed") / "model"
    shutil.copytree(real_model_path, folder)
    state = load_file(folder / "model.safetensors")
    state[LAYER3] = state[LAYER3] * 1.01
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_builtin_texts_are_varied():
    assert len(BUILTIN_TEXTS) >= 16
    assert sum(isinstance(t, tuple) for t in BUILTIN_TEXTS) >= 2
    assert any(not t.isascii() for t in BUILTIN_TEXTS if isinstance(t, str))


@pytest.mark.slow
def test_real_checkpoint_passes_with_json(real_model_path, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["parity", str(real_model_path), "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "verdict: PARITY HOLDS" in stdout and "FAIL" not in stdout
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["first_divergence"] is None
    kinds = {r["kind"] for r in report["rows"]}
    assert kinds == {"weight", "module", "attention", "output"}
    assert all(r["ok"] for r in report["rows"])
    names = {r["name"] for r in report["rows"]}
    assert {"last_hidden_state", "pooler_output", "attentions[5]", "encoder.layer.5.intermediate"} <= names
    assert report["versions"]["transformers"] and report["tokens"] > 100


@pytest.mark.slow
def test_real_checkpoint_bf16_passes_by_relative_criterion(real_model_path):
    report = check(real_model_path, dtype="bfloat16", attn="sdpa")
    assert report.ok, report.format_table()
    rows = [r for r in report.rows if r.kind != "weight"]
    # the bar is transformers' own bf16 error, which is far above fp32 noise
    assert all(r.reference_error is not None for r in rows)
    assert max(r.reference_error for r in rows) > 1e-3


@pytest.mark.slow
def test_perturbed_copy_fails_and_names_tensor_and_module(real_model_path, perturbed, capsys):
    code = main(["parity", str(perturbed), "--reference", str(real_model_path)])
    stdout = capsys.readouterr().out
    assert code == 1
    weight_rows = [line for line in stdout.splitlines() if line.startswith(LAYER3)]
    assert weight_rows and weight_rows[0].endswith("FAIL")
    assert "first divergence: encoder.layer.3.intermediate" in stdout
    assert "verdict: PARITY FAILS" in stdout


@pytest.mark.slow
def test_wrong_gelu_variant_is_diagnosed(real_model_path, monkeypatch, capsys):
    monkeypatch.setitem(bertlite.layers.activations.ACT2FN, "gelu", bertlite.layers.activations.ACT2FN["gelu_new"])
    assert main(["parity", str(real_model_path)]) == 1
    stdout = capsys.readouterr().out
    assert "first divergence: encoder.layer.0.intermediate" in stdout
    cause = next(line for line in stdout.splitlines() if "activation behaves like" in line)
    assert "transformers' activation behaves like ['gelu'" in cause and "bertlite's like [" in cause
    assert "'gelu_new'" in cause.split("bertlite's like")[1] and "GELU variant" in cause


@pytest.mark.slow
def test_wrong_layer_norm_eps_is_diagnosed(real_model_path, monkeypatch, capsys):
    original = bertlite.BertModel.from_pretrained

    def with_wrong_eps(*args, **kwargs):
        model = original(*args, **kwargs)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.eps = 1e-3
        return model

    monkeypatch.setattr(bertlite.BertModel, "from_pretrained", with_wrong_eps)
    assert main(["parity", str(real_model_path)]) == 1
    stdout = capsys.readouterr().out
    assert "first divergence: embeddings" in stdout
    assert "likely cause: LayerNorm eps differs at 13 LayerNorm(s)" in stdout and "transformers 1e-12" in stdout


@pytest.mark.slow
def test_mask_value_is_diagnosed(real_model_path, monkeypatch, capsys):
    def weak_mask(self, attention_mask, embeddings):
        bias = (1.0 - attention_mask[:, None, None, :].to(embeddings.dtype)) * -1.0  # far too weak a mask
        return None if bool(attention_mask.all()) else bias

    monkeypatch.setattr(bertlite.BertModel, "get_attention_bias", weak_mask)
    assert main(["parity", str(real_model_path)]) == 1
    stdout = capsys.readouterr().out
    assert "first divergence: encoder.layer.0.attention" in stdout
    assert "differs only in sequences that contain padding" in stdout


@pytest.mark.parametrize(
    "make_arg, message",
    [
        (lambda tmp: str(tmp / "does-not-exist"), "no such folder"),
        (lambda tmp: _gpt2_folder(tmp), "model_type='gpt2' is a decoder; bertlite serves encoders"),
        (lambda tmp: "some-org/not-cached-bert", "not in the Hugging Face cache"),
    ],
)
def test_load_errors_exit_2_with_one_line(make_arg, message, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    # Offline with an empty cache: the answer must not depend on this machine's network or its HF cache.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    assert main(["parity", make_arg(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertlite parity: error:") and message in lines[0]
    assert "Traceback" not in captured.err


def _gpt2_folder(tmp_path):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 768}))
    return str(folder)


def test_usage_errors_exit_2(real_model_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["parity", str(real_model_path), "--dtype", "int8"])
    assert e.value.code == 2
    assert main(["parity", str(real_model_path), "--text-file", "/nonexistent/texts.txt"]) == 2
    assert "cannot read --text-file" in capsys.readouterr().err


@pytest.mark.slow
def test_text_file_with_pairs(real_model_path, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("first text\nquestion?\tanswer.\n\nthird, with ünïcode\n", encoding="utf-8")
    report = check(real_model_path, text_file=texts, attn="sdpa")
    assert report.ok and report.texts == 3


@pytest.mark.slow
def test_checkpoint_without_pooler(real_model_path, tmp_path, capsys):
    folder = tmp_path / "no_pooler"
    shutil.copytree(real_model_path, folder)
    state = {k: v for k, v in load_file(folder / "model.safetensors").items() if not k.startswith("pooler.")}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    assert main(["parity", str(folder)]) == 0
    stdout = capsys.readouterr().out
    assert "no pooler weights" in stdout and "pooler_output" not in stdout


# --- task heads ---------------------------------------------------------------------


# Heads whose logits take another path than one (B, ...) tensor: two fields of two kinds, (1, B, T) inputs.
SPECIAL_HEADS = ("BertForPreTraining", "BertForMultipleChoice", "BertForQuestionAnswering")
# Few texts keep the head tests quick: short, long, a pair, padding in the batch.
HEAD_TEXTS = [BUILTIN_TEXTS[0], BUILTIN_TEXTS[2], BUILTIN_TEXTS[3], BUILTIN_TEXTS[6]]


@pytest.fixture(scope="module")
def head_folders(tmp_path_factory):
    """Checkpoints saved by transformers' head classes (tiny, random weights far from init)."""
    from tests.helpers import TINY

    folders = {}
    for name in ("BertForSequenceClassification", "BertForMaskedLM", *SPECIAL_HEADS):
        torch.manual_seed(0)
        config = transformers.BertConfig(**TINY, num_labels=2 if name == "BertForQuestionAnswering" else 3)
        model = getattr(transformers, name)(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.3)
        folders[name] = tmp_path_factory.mktemp("heads") / name
        model.save_pretrained(folders[name])
    return folders


def head_text_file(folder):
    path = folder / "texts.txt"
    path.write_text("".join("\t".join(t) + "\n" if isinstance(t, tuple) else t + "\n" for t in HEAD_TEXTS))
    return path


@pytest.mark.parametrize("name", ["BertForSequenceClassification", "BertForMaskedLM"])
def test_head_checkpoint_compares_logits(head_folders, name, tmp_path, capsys):
    out = tmp_path / "report.json"
    args = ["--text-file", str(head_text_file(tmp_path)), "--max-length", "64", "--json", str(out)]
    assert main(["parity", str(head_folders[name]), *args]) == 0
    stdout = capsys.readouterr().out
    assert f"task head {name}: its weights and logits are compared with transformers.AutoModelFor" in stdout
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["head"] == name
    logits = [r for r in report["rows"] if r["kind"] == "logits"]
    assert [r["name"] for r in logits] == ["logits"] and logits[0]["ok"] and logits[0]["max_abs"] == 0.0
    weights = {r["name"] for r in report["rows"] if r["kind"] == "weight"}
    head_weights = {"classifier.weight"} if name == "BertForSequenceClassification" else {"cls.predictions.bias"}
    assert head_weights <= weights and "embeddings.word_embeddings.weight" in weights
    assert not report["only_in_bertlite"] and not report["only_in_transformers"]


def test_perturbed_head_weight_fails_naming_the_logits(head_folders, tmp_path, capsys):
    original = head_folders["BertForSequenceClassification"]
    copy = tmp_path / "perturbed"
    shutil.copytree(original, copy)
    state = load_file(copy / "model.safetensors")
    state["classifier.weight"] = state["classifier.weight"] * 1.01
    save_file(state, copy / "model.safetensors", metadata={"format": "pt"})
    args = ["--reference", str(original), "--text-file", str(head_text_file(tmp_path)), "--max-length", "64"]
    assert main(["parity", str(copy), *args]) == 1
    stdout = capsys.readouterr().out
    rows = {line.split()[0]: line for line in stdout.splitlines() if line and not line.startswith(" ")}
    assert rows["classifier.weight"].endswith("FAIL") and rows["logits"].endswith("FAIL")
    assert rows["last_hidden_state"].endswith("PASS") and rows["pooler_output"].endswith("PASS")
    assert "first divergence: logits" in stdout and "(first: classifier.weight)" in stdout
    assert "look at the task head" in stdout and "verdict: PARITY FAILS" in stdout


def test_special_heads_compare_their_logits_and_head_none_only_the_base(head_folders):
    texts = HEAD_TEXTS
    for name in SPECIAL_HEADS:
        report = check(head_folders[name], texts=texts, max_length=64)
        assert report.ok and report.head == name, report.format_table()
        assert [r.name for r in report.rows if r.kind == "logits"] == list(HEAD_LOGITS[name])
    report = check(head_folders["BertForQuestionAnswering"], texts=texts, max_length=64, head="none")
    assert report.ok and report.head is None and not [r for r in report.rows if r.kind == "logits"]
    assert "--head none: the BertForQuestionAnswering head is not compared" in " ".join(report.notes)


def test_help_says_what_the_head_comparison_compares(capsys):
    with pytest.raises(SystemExit):
        main(["parity", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "With --head auto (the default), when config.json's architectures name a head bertlite implements" in text
    assert (
        "transformers: the matching AutoModelFor<Task>" in text and "--head none compares the base model only" in text
    )


# --- round 2: everything that is not "parity fails" is exit 2 with one line -------------------------------


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A tiny random checkpoint with max_position_embeddings=64 and no tokenizer (random ids of the texts'
    word counts, the longest built-in text being ~270 words)."""
    from tests.helpers import make_hf_model

    folder = tmp_path_factory.mktemp("tiny") / "model"
    make_hf_model().save_pretrained(folder)
    return folder


def _edited_copy(folder, tmp_path, config=None, state=None):
    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    if config is not None:
        (copy / "config.json").write_text(json.dumps({**json.loads((copy / "config.json").read_text()), **config}))
    if state is not None:
        save_file(state(load_file(copy / "model.safetensors")), copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertlite parity: error: "), captured.err
    return lines[0]


def test_default_max_length_is_clamped_to_a_small_model(tiny_folder, tmp_path, capsys):
    # Before: "sequence length 256 exceeds max_position_embeddings=64", a traceback and exit 1.
    out = tmp_path / "report.json"
    assert main(["parity", str(tiny_folder), "--json", str(out)]) == 0
    assert "note: texts truncated to the model's maximum of 64 tokens" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["ok"] and report["options"]["max_length"] == 64
    assert report["tokens"] > 64 * 4  # the long texts ran, cut at 64


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--atol", "nan", "--atol must be a finite number >= 0, got nan"),
        ("--atol", "-1e-5", "--atol must be a finite number >= 0, got -1e-05"),
        ("--rtol", "inf", "--rtol must be a finite number >= 0, got inf"),
        ("--batch-size", "0", "--batch-size must be an integer >= 1, got 0"),
        ("--max-length", "0", "--max-length must be an integer >= 2, got 0"),
    ],
)
def test_bad_options_exit_2(tiny_folder, capsys, option, value, message):
    assert main(["parity", str(tiny_folder), f"{option}={value}"]) == 2
    assert _one_error_line(capsys) == f"bertlite parity: error: {message}"


def test_reference_of_another_shape_exits_2(tiny_folder, tmp_path, capsys):
    from tests.helpers import make_hf_model

    wider = tmp_path / "wider"
    make_hf_model(hidden_size=48).save_pretrained(wider)
    capsys.readouterr()  # save_pretrained's progress bar
    assert main(["parity", str(tiny_folder), "--reference", str(wider)]) == 2
    line = _one_error_line(capsys)
    assert f"--reference {wider} has another shape than {tiny_folder} (hidden_size 48 vs 32)" in line


def test_config_transformers_rejects_exits_2(tiny_folder, tmp_path, capsys):
    # bertlite reads 1 as the number it is; transformers' strict config wants a float for layer_norm_eps.
    folder = _edited_copy(tiny_folder, tmp_path, config={"layer_norm_eps": 1})
    assert main(["parity", str(folder)]) == 2
    line = _one_error_line(capsys)
    assert f"cannot load {folder} with transformers: StrictDataclassFieldValidationError:" in line
    assert "layer_norm_eps" in line


@pytest.mark.parametrize("damage", ["empty_object", "binary_vocab"])
def test_damaged_tokenizer_exits_2_naming_the_file(damage, real_model_path, tiny_folder, tmp_path, capsys):
    # Before: a traceback from transformers' tokenizer loading, exit 1.
    folder = damaged_tokenizer_folder(real_model_path, tmp_path / "model", damage, weights_from=tiny_folder)
    assert main(["parity", str(folder)]) == 2
    line = _one_error_line(capsys)
    assert f"cannot load the tokenizer of {folder}: {folder / DAMAGED_TOKENIZERS[damage][0]}: not a valid " in line


def test_load_error_says_what_to_do_in_parity_not_strict_false(tiny_folder, tmp_path, capsys):
    def drop(state):
        state.pop("encoder.layer.1.output.LayerNorm.weight")
        return state

    folder = _edited_copy(tiny_folder, tmp_path, state=drop)
    assert main(["parity", str(folder)]) == 2
    line = _one_error_line(capsys)
    assert "missing keys (1): encoder.layer.1.output.LayerNorm.weight" in line
    assert "strict" not in line and "parity compares complete checkpoints" in line


def test_non_finite_weights_exit_2_without_python_only_advice(tiny_folder, tmp_path, capsys):
    folder = _edited_copy(tiny_folder, tmp_path, state=lambda s: {**s, "pooler.dense.bias": s["pooler.dense.bias"] / 0})
    assert main(["parity", str(folder)]) == 2
    line = _one_error_line(capsys)
    assert "pooler.dense.bias in model.safetensors (" in line and "NaN and Inf weights cannot be compared" in line
    assert "allow_nonfinite" not in line


@pytest.mark.parametrize("head", ["auto", "none"])
def test_relative_positions_are_refused_with_transformers_5_also_for_a_head(head, tmp_path, capsys):
    # transformers 5 loads such a checkpoint but drops distance_embedding: it is no reference, with or without a head.
    from tests.helpers import TINY

    torch.manual_seed(0)
    config = bertlite.BertConfig(**TINY, position_embedding_type="relative_key", num_labels=2)
    bertlite.BertForSequenceClassification(config).save_pretrained(tmp_path / "relative")
    assert json.loads((tmp_path / "relative" / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"
    ]
    assert main(["parity", str(tmp_path / "relative"), "--head", head, "--max-length", "16"]) == 2
    line = _one_error_line(capsys)
    assert "position_embedding_type='relative_key', which transformers 5." in line
    assert "no longer implements (it drops distance_embedding)" in line
