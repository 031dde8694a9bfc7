"""bertlite.AutoConfig / AutoModel / AutoModelFor<Task>: the classes they build, against transformers."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from huggingface_hub import constants

import bertlite
from bertlite.models.auto import ARCHITECTURES
from tests.helpers import REPO_ID, TINY, assert_weights, checkpoint_files, make_hf_model

# Written out, not read from bertlite.models.auto: what each Auto class must build.
EXPECTED = {
    "AutoModel": "BertModel",
    "AutoModelForPreTraining": "BertForPreTraining",
    "AutoModelForMaskedLM": "BertForMaskedLM",
    "AutoModelForCausalLM": "BertLMHeadModel",
    "AutoModelForNextSentencePrediction": "BertForNextSentencePrediction",
    "AutoModelForSequenceClassification": "BertForSequenceClassification",
    "AutoModelForMultipleChoice": "BertForMultipleChoice",
    "AutoModelForTokenClassification": "BertForTokenClassification",
    "AutoModelForQuestionAnswering": "BertForQuestionAnswering",
}


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**TINY, num_labels=3)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    folder = tmp_path_factory.mktemp("auto") / "classifier"
    model.save_pretrained(folder)
    return folder


def test_each_auto_class_builds_the_bertlite_class_transformers_maps_bert_to():
    for auto_name, class_name in EXPECTED.items():
        config = bertlite.BertConfig(**TINY, is_decoder=class_name == "BertLMHeadModel")
        model = getattr(bertlite, auto_name).from_config(config)
        assert type(model) is getattr(bertlite, class_name), auto_name
        # transformers' own Auto class maps model_type "bert" to the class of the same name.
        assert getattr(transformers, auto_name)._model_mapping._model_mapping["bert"] == class_name
    assert ARCHITECTURES == {cls: auto for auto, cls in EXPECTED.items()}


def test_auto_classes_load_what_transformers_loads(classifier_folder):
    config = bertlite.AutoConfig.from_pretrained(classifier_folder)
    assert isinstance(config, bertlite.BertConfig) and config.num_labels == 3
    batch = {
        "input_ids": torch.tensor([[2, 5, 7, 9, 3], [2, 8, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1] * 5, [1] * 3 + [0] * 2]),
    }
    ours = bertlite.AutoModelForSequenceClassification.from_pretrained(classifier_folder, attn_implementation="eager")
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(
        classifier_folder, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        assert torch.equal(ours(**batch).logits, theirs(**batch).logits)
        base = bertlite.AutoModel.from_pretrained(classifier_folder, attn_implementation="eager")
        assert type(base) is bertlite.BertModel  # the head's keys are dropped, as transformers' AutoModel does
        assert torch.equal(base(**batch).last_hidden_state, theirs.bert(**batch).last_hidden_state)
    half = bertlite.AutoModel.from_pretrained(classifier_folder, dtype="bfloat16")
    assert next(half.parameters()).dtype == torch.bfloat16


def test_model_card_snippet_runs_with_bertlite_alone(real_model_path, monkeypatch):
    """all-MiniLM-L6-v2's model card, with `from transformers import` changed to `from bertlite import`."""
    sentences = ["This is an example sentence", "Each sentence is converted", "Ünïcode and a [MASK] token."]

    def card(module) -> torch.Tensor:
        tokenizer = module.AutoTokenizer.from_pretrained(real_model_path)
        model = module.AutoModel.from_pretrained(real_model_path)
        encoded_input = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            model_output = model(**encoded_input)
        token_embeddings = model_output[0]
        mask = encoded_input["attention_mask"].unsqueeze(-1).expand(token_embeddings.size()).float()
        embeddings = torch.sum(token_embeddings * mask, 1) / torch.clamp(mask.sum(1), min=1e-9)
        return torch.nn.functional.normalize(embeddings, p=2, dim=1)

    expected = card(transformers)
    with monkeypatch.context() as blocked:
        blocked.setitem(__import__("sys").modules, "transformers", None)  # any `import transformers` now fails
        got = card(bertlite)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_every_keyword_reaches_the_class_from_pretrained(monkeypatch, tmp_path):
    seen = {}

    def spy(name_or_path, *args, **kwargs):
        seen.update(name_or_path=name_or_path, args=args, kwargs=kwargs)
        return "model"

    monkeypatch.setattr(bertlite.BertForTokenClassification, "from_pretrained", spy)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    kwargs = dict(num_labels=7, torch_dtype=torch.float16, output_hidden_states=True, revision="v1", subfolder="")
    assert bertlite.AutoModelForTokenClassification.from_pretrained(tmp_path, **kwargs) == "model"
    assert seen == dict(name_or_path=tmp_path, args=(), kwargs=kwargs)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "vit", "patch_size": 16}, "model_type='vit' is not a BERT checkpoint"),
        ({"architectures": ["RobertaForMaskedLM"]}, "no model_type, and architectures=['RobertaForMaskedLM']"),
    ],
)
def test_non_bert_checkpoints_are_refused_by_name(tmp_path, config, message):
    (tmp_path / "config.json").write_text(json.dumps(config))
    for auto in (bertlite.AutoConfig, bertlite.AutoModel, bertlite.AutoModelForMaskedLM, bertlite.AutoModelForCausalLM):
        with pytest.raises(ValueError) as e:
            auto.from_pretrained(tmp_path)
        text = str(e.value)
        assert text.startswith(str(tmp_path / "config.json")) and message in text and "\n" not in text
        assert f"; bertlite.{auto.__name__} loads " in text  # the class the user called, by name


def test_misuse_is_named():
    with pytest.raises(OSError, match=r"AutoModel is built with AutoModel.from_pretrained"):
        bertlite.AutoModel()
    with pytest.raises(TypeError, match="config must be a bertlite.BertConfig"):
        bertlite.AutoModelForMaskedLM.from_config({"hidden_size": 32})
    with pytest.raises(ValueError, match="model_type='gpt2' is not a model bertlite has; bertlite.AutoConfig builds"):
        bertlite.AutoConfig.for_model("gpt2")
    with pytest.raises(ValueError, match="dtype='auto' needs a checkpoint"):
        bertlite.AutoModel.from_config(bertlite.BertConfig(**TINY), dtype="auto")


def test_from_config_options():
    config = bertlite.AutoConfig.for_model("bert", **TINY)
    model = bertlite.AutoModel.from_config(
        config, attn_implementation="eager", add_pooling_layer=False, torch_dtype="bfloat16"
    )
    assert model.attn_implementation == "eager" and model.pooler is None
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with pytest.raises(TypeError, match="colour"):
        bertlite.AutoModel.from_config(config, colour="red")


def test_hub_ids_go_through_bertlites_hub_code(hub, real_model_path, tmp_path, monkeypatch):
    """Auto classes on a hub id, from the stand-in hub on 127.0.0.1 (tests/hub_server.py), then offline."""
    files = checkpoint_files(0, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        files[name] = (real_model_path / name).read_bytes()
    hub.add_commit(REPO_ID, files)
    hub.add_commit("org/gpt2", {"config.json": json.dumps({"model_type": "gpt2"}).encode()})
    texts = ["Hello world.", "A [MASK] in a longer, second text."]
    expected = transformers.AutoTokenizer.from_pretrained(real_model_path)(texts, padding=True, return_tensors="pt")
    for offline in (False, True):
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)  # the second round reads the cache only
        tokenizer = bertlite.AutoTokenizer.from_pretrained(REPO_ID)
        got = tokenizer(texts, padding=True, return_tensors="pt")
        assert list(got) == list(expected) and all(torch.equal(got[k], expected[k]) for k in expected)
        assert tokenizer.model_max_length == 512
        model = bertlite.AutoModel.from_pretrained(REPO_ID)
    assert_weights(model, seed=0)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ValueError, match=r"config.json: model_type='gpt2' is a decoder; bertlite serves encoders"):
        bertlite.AutoModelForMaskedLM.from_pretrained("org/gpt2")


def test_auto_config_takes_a_path_to_config_json(classifier_folder):
    by_file = bertlite.AutoConfig.from_pretrained(classifier_folder / "config.json")
    assert by_file.to_dict() == bertlite.BertConfig.from_pretrained(classifier_folder).to_dict()
    assert by_file.num_labels == transformers.AutoConfig.from_pretrained(classifier_folder / "config.json").num_labels


def test_model_from_config_casts_like_the_auto_class():
    config = bertlite.BertConfig(**TINY)
    for kwargs in ({"dtype": "bfloat16"}, {"torch_dtype": torch.float16}, {"dtype": "float16", "torch_dtype": None}):
        expected = transformers.BertModel._from_config(transformers.BertConfig(**TINY), **kwargs).dtype
        assert bertlite.BertModel.from_config(config, **kwargs).dtype == expected
    with pytest.raises(ValueError, match="dtype='auto' needs a checkpoint"):
        bertlite.BertModel.from_config(config, dtype="auto")


def test_auto_config_imports_neither_torch_nor_tokenizers(classifier_folder):
    import subprocess
    import sys

    code = (
        "import sys, bertlite; bertlite.AutoConfig.from_pretrained(sys.argv[1]); "
        "sys.exit(sorted({'torch', 'tokenizers'} & set(sys.modules)) != [])"
    )
    subprocess.run([sys.executable, "-c", code, str(classifier_folder)], check=True)


def test_a_checkpoint_with_code_of_its_own_is_refused_by_name(tmp_path, real_model_path):
    make_hf_model().save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (tmp_path / name).write_bytes((real_model_path / name).read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    remote = {"AutoConfig": "configuration_bert.JinaBertConfig", "AutoModel": "modeling_bert.JinaBertModel"}
    (tmp_path / "config.json").write_text(json.dumps({**config, "auto_map": remote}))
    message = r"auto_map names the checkpoint's own code \(AutoConfig: configuration_bert.JinaBertConfig\)"
    for load in (
        bertlite.BertModel.from_pretrained,
        bertlite.AutoModel.from_pretrained,
        bertlite.Embedder.from_pretrained,
    ):
        with pytest.raises(ValueError, match=message):
            load(tmp_path)
    # a tokenizer of its own only: the model is BERT's
    tokenizer_only = {"AutoTokenizer": ["tokenization.MyTokenizer", None]}
    (tmp_path / "config.json").write_text(json.dumps({**config, "auto_map": tokenizer_only}))
    assert type(bertlite.BertModel.from_pretrained(tmp_path)) is bertlite.BertModel


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text", "mistral"])
def test_a_decoder_is_refused_by_its_model_type_in_one_line(model_type, tmp_path):
    # transformers' own config of the decoder, as its checkpoints ship it
    config = transformers.AutoConfig.for_model(model_type)
    config.architectures = [f"{type(config).__name__.removesuffix('Config').removesuffix('Text')}ForCausalLM"]
    config.save_pretrained(tmp_path)
    loaders = [
        bertlite.AutoConfig.from_pretrained,
        bertlite.AutoModel.from_pretrained,
        bertlite.BertConfig.from_pretrained,
        bertlite.Embedder.from_pretrained,
        bertlite.CrossEncoder,
        bertlite.SentenceTransformer,
    ]
    for load in loaders:
        with pytest.raises(ValueError) as e:
            load(str(tmp_path))
        text = str(e.value)
        assert f"model_type={model_type!r}" in text and "is a decoder; bertlite serves encoders" in text, load
        assert "\n" not in text
