"""transformers code as people write it (model cards, tutorials, the docs), run unchanged on bertlite.

Each snippet runs twice in the same test, once with the transformers class and once with the bertlite
class of the same name, and the outputs must agree. The other tests check one drop-in member at a time
against transformers' value on the same model: from_pretrained's keyword routing, the PreTrainedModel
members, ModelOutput, forward's keywords, save_pretrained.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers

import bertlite
from bertlite.models.heads import MaskedLMOutput
from tests.helpers import TINY, make_hf_model, random_batch
from tests.hub_server import HubServer

SENTENCES = ["This is an example sentence", "Each sentence is converted"]
EXACT = dict(rtol=0.0, atol=0.0)


@pytest.fixture(scope="module")
def tokenizer(real_model_path: Path) -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(real_model_path)


@pytest.fixture(scope="module")
def texts(corpus_texts: list[str]) -> list[str]:
    """The cards' sentences and real paragraphs of different lengths (short ones: the test stays fast)."""
    return SENTENCES + [text for text in corpus_texts if len(text) < 400][:6]


def save_hf(tmp_path: Path, cls: type = transformers.BertForSequenceClassification, seed: int = 0, **config) -> Path:
    """A tiny random transformers checkpoint of `cls`, saved as transformers saves it."""
    torch.manual_seed(seed)
    model = cls(transformers.BertConfig(**{**TINY, **config}))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    folder = tmp_path / f"{cls.__name__}-{seed}"
    model.save_pretrained(folder)
    return folder


# --- real-world snippets ------------------------------------------------------------------


@pytest.mark.slow
def test_sentence_embedding_cards(real_model_path: Path, tokenizer, texts: list[str]) -> None:
    # Two model cards' "Usage (HuggingFace Transformers)" on one loaded model each: sentence-transformers/
    # all-MiniLM-L6-v2 (mean pooling) and BAAI/bge-* ([CLS] pooling), both normalised.
    def mean_pooling(model_output, attention_mask):
        token_embeddings = model_output[0]  # First element of model_output contains all token embeddings
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
        return torch.sum(token_embeddings * input_mask_expanded, 1) / torch.clamp(input_mask_expanded.sum(1), min=1e-9)

    def cards(model_class: type) -> tuple[torch.Tensor, torch.Tensor]:
        model = model_class.from_pretrained(real_model_path)
        model.eval()
        encoded_input = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            model_output = model(**encoded_input)
        minilm = F.normalize(mean_pooling(model_output, encoded_input["attention_mask"]), p=2, dim=1)
        bge = torch.nn.functional.normalize(model_output[0][:, 0], p=2, dim=1)
        return minilm, bge

    (minilm_theirs, bge_theirs), (minilm_ours, bge_ours) = cards(transformers.AutoModel), cards(bertlite.BertModel)
    torch.testing.assert_close(minilm_ours, minilm_theirs, **EXACT)
    torch.testing.assert_close(bge_ours, bge_theirs, **EXACT)


@pytest.mark.slow
def test_feature_extraction_last_four_hidden_states_as_tuples(real_model_path: Path, tokenizer, texts) -> None:
    # The BERT paper's best feature-based setup (concatenate the last four layers), as tutorials write it.
    def features(model_class: type) -> tuple[torch.Tensor, int]:
        model = model_class.from_pretrained(real_model_path, output_hidden_states=True, attn_implementation="eager")
        model.eval()
        inputs = tokenizer(texts, padding=True, return_tensors="pt").to(model.device)
        with torch.no_grad():
            outputs = model(**inputs, return_dict=False)
        hidden_states = outputs[2]
        return torch.cat(hidden_states[-4:], dim=-1), len(outputs)

    (theirs, n_theirs), (ours, n_ours) = features(transformers.BertModel), features(bertlite.BertModel)
    assert n_ours == n_theirs == 3  # last_hidden_state, pooler_output, hidden_states
    torch.testing.assert_close(ours, theirs, **EXACT)


def test_cross_encoder_with_one_label(tokenizer, tmp_path: Path) -> None:
    # A cross-encoder, as cross-encoder/ms-marco-MiniLM-L6-v2's card runs it: a one-logit head scoring
    # (query, passage) pairs. A tiny model with the real tokenizer's vocabulary.
    path = save_hf(tmp_path, vocab_size=tokenizer.vocab_size, max_position_embeddings=128, num_labels=1)
    queries = ["How many people live in Berlin?"] * 2
    passages = ["Berlin has 3,520,031 registered inhabitants.", "New York City is famous for its museums."]

    def card(model_class: type) -> tuple[torch.Tensor, torch.Tensor]:
        model = model_class.from_pretrained(path, num_labels=1)
        model.eval()
        features = tokenizer(queries, passages, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            scores = model(**features).logits
            loss = model(**features, labels=torch.tensor([1.0, 0.0])).loss  # num_labels=1: regression (MSE)
        return scores, loss

    ours, our_loss = card(bertlite.BertForSequenceClassification)
    theirs, their_loss = card(transformers.AutoModelForSequenceClassification)
    assert ours.shape == (2, 1)
    torch.testing.assert_close(ours, theirs, **EXACT)
    torch.testing.assert_close(our_loss, their_loss, **EXACT)


@pytest.mark.slow
def test_plain_training_loop(tmp_path: Path) -> None:
    # The "fine-tune in native PyTorch" loop of the transformers docs, on a tiny checkpoint (no dropout
    # saved), with dropout switched on through from_pretrained, and a classifier both initialise anew.
    path = save_hf(tmp_path, transformers.BertModel)
    batch = {**random_batch(transformers.BertConfig(**TINY), batch=4, seq=9), "labels": torch.tensor([0, 2, 1, 2])}

    def train(model_class: type) -> list[float]:
        torch.manual_seed(0)
        model = model_class.from_pretrained(
            path, num_labels=3, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, attn_implementation="eager"
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        model.train()
        losses = []
        for _ in range(4):
            outputs = model(**batch)
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        return losses

    with pytest.warns(UserWarning, match="newly initialised"):
        ours = train(bertlite.BertForSequenceClassification)
    theirs = train(transformers.BertForSequenceClassification)
    assert ours[-1] < ours[0]
    assert ours == theirs


# --- from_pretrained's keywords ------------------------------------------------------------

OVERRIDES = {
    "num_labels": 3,
    "id2label": {0: "neg", 1: "pos"},
    "problem_type": "multi_label_classification",
    "output_hidden_states": True,
    "output_attentions": True,
    "return_dict": False,
    "hidden_dropout_prob": 0.05,
    "attention_probs_dropout_prob": 0.0,
    "classifier_dropout": 0.2,
    "layer_norm_eps": 1e-5,
}


def test_config_fields_override_the_loaded_config(tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertModel)
    for name, value in OVERRIDES.items():
        theirs = transformers.BertForSequenceClassification.from_pretrained(path, **{name: value}).config
        with pytest.warns(UserWarning, match="newly initialised"):
            model = bertlite.BertForSequenceClassification.from_pretrained(path, **{name: value})
        for field in ("num_labels", "id2label", name):
            assert getattr(model.config, field) == getattr(theirs, field), (name, field)
        # transformers keeps the old label2id when only id2label is given; bertlite derives the new one.
        assert model.config.label2id == {label: i for i, label in model.config.id2label.items()}
    with pytest.warns(UserWarning, match="newly initialised"):
        model = bertlite.BertForSequenceClassification.from_pretrained(
            path, num_labels=3, hidden_dropout_prob=0.3, classifier_dropout=0.2
        )
    assert model.classifier.out_features == 3 and model.dropout.p == 0.2
    dropouts = {
        name.rsplit(".", 2)[-2]: m.p for name, m in model.bert.named_modules() if isinstance(m, torch.nn.Dropout)
    }
    assert dropouts == {"embeddings": 0.3, "self": 0.0, "output": 0.3}  # the checkpoint's attention dropout stays


def test_loading_options_and_aliases(tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertModel)
    (tmp_path / "repo").mkdir()
    path.rename(tmp_path / "repo" / "sub")
    model = bertlite.BertModel.from_pretrained(
        tmp_path / "repo",
        subfolder="sub",
        revision=None,
        cache_dir=tmp_path / "cache",
        token=None,
        local_files_only=True,
        force_download=False,
        attn_implementation="eager",
        torch_dtype=torch.float16,
        device_map={"": "cpu"},
        low_cpu_mem_usage=True,
        trust_remote_code=False,
    )
    theirs = transformers.BertModel.from_pretrained(tmp_path / "repo", subfolder="sub", torch_dtype=torch.float16)
    assert model.dtype == theirs.dtype == torch.float16 and model.device == theirs.device
    assert model.attn_implementation == "eager"
    # config= as a path, or as transformers' config object (converted).
    their_config = transformers.BertConfig.from_pretrained(tmp_path / "repo" / "sub", hidden_act="relu")
    for config in (str(tmp_path / "repo" / "sub" / "config.json"), their_config):
        model = bertlite.BertModel.from_pretrained(tmp_path / "repo", subfolder="sub", config=config)
        assert model.config.hidden_size == TINY["hidden_size"]
    assert model.config.hidden_act == "relu" and isinstance(model.config, bertlite.BertConfig)
    model, info = bertlite.BertModel.from_pretrained(tmp_path / "repo", subfolder="sub", output_loading_info=True)
    assert info == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
    # A fine-tuned head with other labels: refused by shape, or newly initialised with ignore_mismatched_sizes.
    head = save_hf(tmp_path)
    with pytest.raises(bertlite.CheckpointError, match=r"classifier.weight: checkpoint \(2, 32\) .* model \(5, 32\)"):
        bertlite.BertForSequenceClassification.from_pretrained(head, num_labels=5)
    with pytest.warns(UserWarning, match="ignore_mismatched_sizes=True.*classifier.bias"):
        model, info = bertlite.BertForSequenceClassification.from_pretrained(
            head, num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True
        )
    _, their_info = transformers.BertForSequenceClassification.from_pretrained(
        head, num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert sorted(info["mismatched_keys"]) == sorted(key for key, *_ in their_info["mismatched_keys"])
    assert model.classifier.weight.shape == (5, 32) and model.classifier.weight.abs().sum() > 0
    with pytest.raises(ValueError, match="splits the model over devices"):
        bertlite.BertModel.from_pretrained(tmp_path / "repo", subfolder="sub", device_map={"encoder": 0, "pooler": 1})


def test_unknown_keywords_are_named(tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertModel)
    with pytest.raises(TypeError, match="'num_lables'"):
        bertlite.BertForSequenceClassification.from_pretrained(path, num_lables=3)
    with pytest.raises(TypeError, match="'output_hiden_states'"):
        bertlite.BertConfig.from_pretrained(path, output_hiden_states=True)
    config = bertlite.BertConfig.from_pretrained(path)
    with pytest.raises(TypeError, match="'num_labels'.*set them on the config"):
        bertlite.BertForSequenceClassification.from_pretrained(path, config=config, num_labels=3)
    # Constructor arguments still go through, as in transformers.
    assert bertlite.BertModel.from_pretrained(path, add_pooling_layer=False, strict=False).pooler is None


def test_config_from_pretrained_takes_overrides(tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertModel)
    ours = bertlite.BertConfig.from_pretrained(path, num_labels=2, output_attentions=True)
    theirs = transformers.BertConfig.from_pretrained(path, num_labels=2, output_attentions=True)
    assert (ours.num_labels, ours.output_attentions) == (theirs.num_labels, theirs.output_attentions) == (2, True)
    ours, unused = bertlite.BertConfig.from_pretrained(path, foo=False, hidden_act="relu", return_unused_kwargs=True)
    theirs, their_unused = transformers.BertConfig.from_pretrained(
        path, foo=False, hidden_act="relu", return_unused_kwargs=True
    )
    assert unused == their_unused == {"foo": False} and ours.hidden_act == theirs.hidden_act == "relu"
    assert bertlite.BertConfig.from_pretrained(path / "config.json").hidden_size == TINY["hidden_size"]
    ours = bertlite.BertConfig.from_pretrained(path, torch_dtype=torch.float16)
    assert ours.to_dict()["dtype"] == str(
        transformers.BertConfig.from_pretrained(path, torch_dtype=torch.float16).dtype
    ).removeprefix("torch.")
    with pytest.raises(ValueError, match="hidden_dropout_prob must be in"):
        bertlite.BertConfig.from_pretrained(path, hidden_dropout_prob=2.0)


# --- PreTrainedModel and PreTrainedConfig members ------------------------------------------

HEADS = ["BertModel", "BertForMaskedLM", "BertForSequenceClassification", "BertLMHeadModel", "BertForPreTraining"]


@pytest.mark.parametrize("name", HEADS)
def test_members_match_transformers(name: str, tmp_path: Path) -> None:
    path = save_hf(tmp_path, getattr(transformers, name), is_decoder=name == "BertLMHeadModel")
    theirs = getattr(transformers, name).from_pretrained(path)
    ours = getattr(bertlite, name).from_pretrained(path)
    for flags in [dict(), dict(only_trainable=True), dict(exclude_embeddings=True)]:
        assert ours.num_parameters(**flags) == theirs.num_parameters(**flags), flags
    ours.base_model.embeddings.requires_grad_(False)
    theirs.base_model.embeddings.requires_grad_(False)
    assert ours.num_parameters(only_trainable=True) == theirs.num_parameters(only_trainable=True)
    # transformers also counts its position_ids/token_type_ids buffers; bertlite makes them on the fly.
    assert ours.get_memory_footprint() == theirs.get_memory_footprint(return_buffers=False)
    assert (ours.device, ours.dtype, ours.main_input_name) == (theirs.device, theirs.dtype, theirs.main_input_name)
    assert ours.input_modalities == theirs.input_modalities
    assert ours.name_or_path == theirs.name_or_path == str(path) == ours.__dict__["name_or_path"]
    assert ours.config.name_or_path == theirs.config.name_or_path
    assert ours.supports_gradient_checkpointing == theirs.supports_gradient_checkpointing
    assert ours.config_class is bertlite.BertConfig
    assert type(ours.base_model).__name__ == type(theirs.base_model).__name__
    # bertlite has no generate(), so it says so even where transformers' BertLMHeadModel can generate.
    assert ours.can_generate() is (False if name == "BertLMHeadModel" else theirs.can_generate())
    assert torch.equal(ours.dummy_inputs["input_ids"], theirs.dummy_inputs["input_ids"])
    their_out, our_out = theirs.get_output_embeddings(), ours.get_output_embeddings()
    assert (our_out is None) == (their_out is None)
    if our_out is not None:
        assert our_out.weight is ours.get_input_embeddings().weight
    assert json.loads(ours.config.to_json_string(use_diff=False)) == json.loads(json.dumps(ours.config.to_dict()))
    diff = json.loads(ours.config.to_json_string())
    assert diff["hidden_size"] == TINY["hidden_size"] and "hidden_act" not in diff  # 32 is not BERT's 768
    assert ours.config.use_return_dict is True and ours.config.is_encoder_decoder is theirs.config.is_encoder_decoder
    assert ours.config.get_text_config() is ours.config
    fresh = type(ours).from_config(ours.config, dtype=torch.bfloat16)
    assert fresh.dtype == torch.bfloat16 and fresh.config is not ours.config and fresh.name_or_path == str(path)


@pytest.mark.parametrize(("tied", "mean_resizing"), [(True, True), (False, True), (False, False)])
@pytest.mark.slow
def test_resize_token_embeddings_like_transformers(tied: bool, mean_resizing: bool, tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertForMaskedLM, tie_word_embeddings=tied)
    theirs = transformers.BertForMaskedLM.from_pretrained(path)
    ours = bertlite.BertForMaskedLM.from_pretrained(path)
    embedding = ours.get_input_embeddings()
    for size, multiple in [(120, None), (101, 8), (90, None)]:
        torch.manual_seed(1)
        theirs.resize_token_embeddings(size, pad_to_multiple_of=multiple, mean_resizing=mean_resizing)
        torch.manual_seed(1)
        our_embedding = ours.resize_token_embeddings(size, pad_to_multiple_of=multiple, mean_resizing=mean_resizing)
        assert our_embedding is embedding and ours.config.vocab_size == theirs.config.vocab_size
        their_state, our_state = theirs.state_dict(), ours.state_dict()
        assert our_state.keys() == their_state.keys()
        for key, value in their_state.items():
            torch.testing.assert_close(our_state[key], value, **EXACT, msg=key)
        assert (ours.cls.predictions.decoder.weight is embedding.weight) == tied
        assert ours.cls.predictions.decoder.bias is ours.cls.predictions.bias
        ids = torch.tensor([[1, 5, ours.config.vocab_size - 1]])
        with torch.no_grad():
            torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, **EXACT)
    with pytest.raises(ValueError, match="pad_to_multiple_of must be a positive integer"):
        ours.resize_token_embeddings(100, pad_to_multiple_of=0)


def test_input_require_grads_hook() -> None:
    model = bertlite.BertModel(bertlite.BertConfig(**TINY)).requires_grad_(False)
    ids = torch.tensor([[1, 2, 3]])
    assert not model(ids).last_hidden_state.requires_grad
    model.enable_input_require_grads()
    assert model(ids).last_hidden_state.requires_grad
    model.disable_input_require_grads()
    assert not model(ids).last_hidden_state.requires_grad
    with pytest.raises(NotImplementedError, match="removed in transformers v5; pass attention_mask"):
        model.get_extended_attention_mask(torch.ones(1, 3), (1, 3))


# --- outputs and forward's keywords --------------------------------------------------------


@pytest.mark.slow
def test_outputs_behave_like_transformers_model_outputs() -> None:
    hf = make_hf_model()
    ours = bertlite.BertModel.from_config(bertlite.BertConfig.from_dict(hf.config.to_dict()))
    ours.load_state_dict(hf.state_dict())
    inputs = random_batch(hf.config)
    for flags in [dict(), dict(output_hidden_states=True), dict(output_attentions=True, output_hidden_states=True)]:
        with torch.no_grad():
            theirs, out = hf(**inputs, **flags), ours.eval()(**inputs, **flags)
        # transformers' output has one more field, cross_attentions (an empty tuple here): bertlite has none.
        their_keys = [key for key in theirs.keys() if key != "cross_attentions"]
        assert isinstance(out, dict) and list(out.keys()) == their_keys
        assert len(out.to_tuple()) == len(their_keys) == len(out)
        assert out[1] is out["pooler_output"] is out.pooler_output and out[-1] is out.to_tuple()[-1]
        assert [type(v) for v in out.values()] == [type(theirs[key]) for key in their_keys]
        assert out.get("attentions", "absent") is out.attentions if "attentions" in out else "absent"
    with pytest.raises(KeyError):
        ours(**inputs)["hidden_states"]  # None fields are no keys, as in transformers
    out = MaskedLMOutput(logits=torch.ones(1))
    out["input_ids"] = torch.zeros(1)  # the fill-mask pipeline adds keys this way
    assert torch.equal(out.input_ids, out["input_ids"])
    out.loss = torch.tensor(2.0)  # a field set later becomes a key (after the others, as in transformers)
    assert list(out.keys()) == ["logits", "input_ids", "loss"]
    for method in ("pop", "update", "setdefault", "__delitem__"):
        with pytest.raises(TypeError, match="does not support"):
            getattr(out, method)("logits")
    values, spec = torch.utils._pytree.tree_flatten(out)  # what torch.export and DDP see
    rebuilt = torch.utils._pytree.tree_unflatten(values, spec)
    assert isinstance(rebuilt, MaskedLMOutput) and list(rebuilt.keys()) == ["logits", "input_ids", "loss"]
    for copied in (copy.deepcopy(out), pickle.loads(pickle.dumps(out))):
        assert list(copied.keys()) == list(out.keys()) and torch.equal(copied.loss, out.loss)
    # With transformers imported (as here), an output is also its ModelOutput, of the same name.
    assert isinstance(out, transformers.utils.ModelOutput) and type(out).__name__ == "MaskedLMOutput"
    assert all(isinstance(o, transformers.utils.ModelOutput) for o in (rebuilt, copy.deepcopy(out)))


def test_forward_ignores_what_transformers_ignores(tokenizer, tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertModel, vocab_size=tokenizer.vocab_size)
    ours, theirs = bertlite.BertModel.from_pretrained(path), transformers.BertModel.from_pretrained(path)
    inputs = tokenizer(
        SENTENCES, padding=True, return_special_tokens_mask=True, return_length=True, return_tensors="pt"
    )
    assert {"special_tokens_mask", "length"} <= set(inputs)
    with torch.no_grad():
        torch.testing.assert_close(ours(**inputs).pooler_output, theirs(**inputs).pooler_output, **EXACT)
        ours(**inputs, head_mask=None, encoder_hidden_states=None, past_key_values=None, num_items_in_batch=4)
    with pytest.raises(TypeError, match="BertModel.forward.. got an unexpected keyword argument 'atention_mask'"):
        ours(input_ids=inputs["input_ids"], atention_mask=inputs["attention_mask"])
    with pytest.raises(NotImplementedError, match="head_mask was removed in transformers v5"):
        ours(input_ids=inputs["input_ids"], head_mask=torch.ones(2, 4))


@pytest.mark.parametrize("name", ["BertLMHeadModel", "BertForMaskedLM", "BertForSequenceClassification"])
@pytest.mark.slow
def test_num_items_in_batch_as_transformers_uses_it(name: str, tmp_path: Path) -> None:
    # Trainer passes num_items_in_batch to every forward with **kwargs; transformers' causal-LM loss divides
    # its sum by it, the other BERT heads take their mean and ignore it.
    path = save_hf(tmp_path, getattr(transformers, name), is_decoder=name == "BertLMHeadModel")
    ours, theirs = getattr(bertlite, name).from_pretrained(path), getattr(transformers, name).from_pretrained(path)
    batch = random_batch(ours.config)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    if name == "BertForSequenceClassification":
        labels = torch.tensor([1, 0, 1])
    extra = dict(num_items_in_batch=torch.tensor(50), special_tokens_mask=torch.zeros_like(batch["input_ids"]))
    with torch.no_grad():
        our_loss, their_loss = ours(**batch, labels=labels, **extra).loss, theirs(**batch, labels=labels, **extra).loss
        mean_loss = ours(**batch, labels=labels).loss
    torch.testing.assert_close(our_loss, their_loss, **EXACT)
    assert (our_loss == mean_loss).item() is (name != "BertLMHeadModel")
    with pytest.raises(TypeError, match=f"{name}.forward.. got an unexpected keyword argument 'lables'"):
        ours(**batch, lables=labels)


# --- save_pretrained -------------------------------------------------------------------------


def test_save_pretrained_bin_and_state_dict(tmp_path: Path) -> None:
    path = save_hf(tmp_path, transformers.BertForMaskedLM)
    ours = bertlite.BertForMaskedLM.from_pretrained(path)
    folder = tmp_path / "out"
    ours.save_pretrained(folder)  # safetensors first: the .bin save must replace it, not sit beside it
    ours.save_pretrained(folder, safe_serialization=False, max_shard_size="5GB")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "pytorch_model.bin"]
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    assert "cls.predictions.decoder.weight" not in state  # tied: stored once, under the embedding's name
    theirs = transformers.BertForMaskedLM.from_pretrained(folder)
    reloaded = bertlite.BertForMaskedLM.from_pretrained(folder)
    ids = torch.tensor([[2, 7, 9, 4]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, ours(ids).logits, **EXACT)
        torch.testing.assert_close(theirs(ids).logits, ours(ids).logits, **EXACT)
    # Trainer's call: the model's own state_dict (tied target included), is_main_process.
    changed = dict(ours.state_dict())
    changed["cls.predictions.transform.dense.bias"] = changed["cls.predictions.transform.dense.bias"] + 1.0
    ours.save_pretrained(tmp_path / "sd", state_dict=changed, is_main_process=True)
    reloaded = bertlite.BertForMaskedLM.from_pretrained(tmp_path / "sd")
    assert torch.equal(reloaded.cls.predictions.transform.dense.bias, changed["cls.predictions.transform.dense.bias"])
    ours.save_pretrained(tmp_path / "rank1", is_main_process=False)
    assert not (tmp_path / "rank1").exists()
    with pytest.raises(TypeError, match="'safe_serialisation'"):
        ours.save_pretrained(tmp_path / "x", safe_serialisation=False)
    with pytest.raises(TypeError, match="only apply with push_to_hub=True"):
        ours.save_pretrained(tmp_path / "x", repo_id="org/x")


@pytest.mark.slow
def test_push_to_hub(hub: HubServer, tmp_path: Path) -> None:
    ours = bertlite.BertForSequenceClassification.from_pretrained(save_hf(tmp_path))
    ours.save_pretrained(tmp_path / "tiny", push_to_hub=True, repo_id="org/pushed", commit_message="first")
    assert hub.count("POST", "/api/repos/create") == 1 and hub.count("POST", "/api/models/org/pushed/commit/main") == 1
    repo = hub.repos["org/pushed"]
    assert sorted(repo.commits[repo.branches["main"]]) == ["config.json", "model.safetensors"]
    batch = random_batch(ours.config)
    for model_class in (bertlite.BertForSequenceClassification, transformers.BertForSequenceClassification):
        reloaded = model_class.from_pretrained("org/pushed")
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**batch).logits, ours(**batch).logits, **EXACT)
    # Again, through model.push_to_hub, into the now existing repo, as .bin: the old model.safetensors (which
    # a loader would prefer) goes in the same commit; other files stay.
    hub.add_commit("org/pushed", {**repo.commits[repo.branches["main"]], "2_Dense/model.safetensors": b"x"})
    with torch.no_grad():
        ours.classifier.bias += 1.0
    url = ours.push_to_hub("org/pushed", safe_serialization=False, commit_message="second")
    assert url.startswith(f"{hub.endpoint}/org/pushed/commit/")
    files = repo.commits[repo.branches["main"]]
    assert sorted(files) == ["2_Dense/model.safetensors", "config.json", "pytorch_model.bin"]
    reloaded = bertlite.BertForSequenceClassification.from_pretrained("org/pushed")
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, ours(**batch).logits, **EXACT)
