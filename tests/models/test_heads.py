"""Task heads against transformers: logits and losses, tying, and loading across classes."""

from __future__ import annotations

import importlib
import inspect
import json
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open
from transformers.utils import find_labels

import bertlite
from bertlite.errors import CheckpointError
from tests.helpers import (
    HEAD_CONFIG,
    HEADS,
    TINY,
    TOL,
    assert_same,
    assert_tied,
    head_inputs,
    make_hf_head,
    make_hf_model,
    random_batch,
    to_ours,
)
from tests.helpers import HEAD_CONFIGS as CONFIGS
from tests.helpers import write_folder as write


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("name", HEADS)
def test_logits_and_loss_match_transformers(name, config_name, attn):
    hf = make_hf_head(name, attn=attn, **CONFIGS[config_name])
    ours = to_ours(hf, attn=attn)
    inputs = head_inputs(name, hf.config)
    with torch.no_grad():
        theirs, mine = hf(**inputs), ours(**inputs)
    assert mine.loss is not None and torch.isfinite(mine.loss)
    assert_same(mine, theirs)
    without_labels = {k: v for k, v in inputs.items() if "label" not in k and "positions" not in k}
    with torch.no_grad():
        assert_same(ours(**without_labels), hf(**without_labels))


@pytest.mark.parametrize("name", HEADS)
def test_tuple_output_and_hidden_states(name):
    hf = make_hf_head(name)
    ours = to_ours(hf)
    inputs = head_inputs(name, hf.config)
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        theirs = hf(**inputs, **flags, use_cache=False) if name == "BertLMHeadModel" else hf(**inputs, **flags)
        mine = ours(**inputs, **flags, return_dict=False)
    # transformers' causal LM adds a cache and (empty) cross-attentions; bertlite supports neither
    their_tuple = [theirs[k] for k in theirs.keys() if k not in ("cache", "cross_attentions")]
    assert isinstance(mine, tuple) and len(mine) == len(their_tuple)
    torch.testing.assert_close(mine[0], theirs.loss, **TOL)  # loss first, as in transformers
    for ours_t, their_t in zip(mine[-2] + mine[-1], theirs.hidden_states + theirs.attentions, strict=True):
        torch.testing.assert_close(ours_t, their_t, **TOL)


@pytest.mark.parametrize(
    "num_labels, labels, problem_type",
    [
        (1, torch.tensor([0.5, -1.0, 2.0]), None),  # inferred: regression
        (3, torch.tensor([2, 0, 1]), None),  # inferred: single label (integer labels)
        (3, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]), None),  # inferred: multi label
        (3, torch.randn(3, 3), "regression"),  # several regression targets
        (2, torch.tensor([1, 0, 1]), "single_label_classification"),
        (3, torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), "multi_label_classification"),
    ],
)
def test_sequence_classification_problem_types(num_labels, labels, problem_type):
    hf = make_hf_head("BertForSequenceClassification", num_labels=num_labels, problem_type=problem_type)
    ours = to_ours(hf)
    assert ours.config.problem_type == problem_type
    inputs = {**random_batch(hf.config), "labels": labels}
    with torch.no_grad():
        theirs, mine = hf(**inputs), ours(**inputs)
    torch.testing.assert_close(mine.loss, theirs.loss, **TOL)
    torch.testing.assert_close(mine.logits, theirs.logits, **TOL)
    assert ours.config.problem_type == hf.config.problem_type  # inferred once and kept, like transformers


@pytest.mark.slow
def test_lm_head_is_causal_and_loss_is_next_token():
    hf = make_hf_head("BertLMHeadModel")
    ours = to_ours(hf)
    ids = torch.randint(1, 99, (2, 9), generator=torch.Generator().manual_seed(3))
    changed = ids.clone()
    changed[:, -1] = (ids[:, -1] + 1) % 99
    with torch.no_grad():
        a, b = ours(ids).logits, ours(changed).logits
        torch.testing.assert_close(a[:, :-1], b[:, :-1], atol=0, rtol=0)  # the future does not leak back
        manual = torch.nn.functional.cross_entropy(a[:, :-1].reshape(-1, 99), ids[:, 1:].reshape(-1))
        torch.testing.assert_close(ours(ids, labels=ids).loss, manual)
        torch.testing.assert_close(ours(ids, labels=ids).loss, hf(ids, labels=ids).loss, **TOL)


@pytest.mark.parametrize("name", HEADS)
def test_forward_signature_serves_trainer_like_transformers(name):
    # Trainer keeps the dataset columns forward names and takes its label names from them (find_labels).
    ours, theirs = (
        inspect.signature(getattr(bertlite, name).forward),
        inspect.signature(getattr(transformers, name).forward),
    )
    inputs = ["input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds"]
    assert list(ours.parameters)[1:6] == list(theirs.parameters)[1:6] == inputs  # same positional order
    assert find_labels(getattr(bertlite, name)) == find_labels(getattr(transformers, name))
    assert list(ours.parameters.values())[-1].kind is inspect.Parameter.VAR_KEYWORD


def test_heads_pass_bert_model_keywords_through():
    config = bertlite.BertConfig(**TINY, is_decoder=True)
    ids = torch.ones(1, 4, dtype=torch.long)
    # use_cache is no parameter of the head's forward: BertModel.forward gets it and refuses it.
    lm = bertlite.BertLMHeadModel(config)
    with pytest.raises(NotImplementedError, match="use_cache=True"):
        lm(ids, use_cache=True)
    shifted = torch.tensor([[5, 6, 7, -100]])
    with torch.no_grad():  # shift_labels, a keyword the head itself reads, is not passed on
        torch.testing.assert_close(
            lm(ids, labels=torch.tensor([[4, 5, 6, 7]])).loss, lm(ids, labels=ids, shift_labels=shifted).loss
        )
    with pytest.raises(
        TypeError, match=r"BertForTokenClassification.forward\(\) got an unexpected keyword argument 'lables'"
    ):
        bertlite.BertForTokenClassification(config)(ids, lables=ids)


def test_bad_inputs_and_configs_are_named():
    config = bertlite.BertConfig(**TINY)
    with pytest.raises(ValueError, match="needs num_labels=2"):
        bertlite.BertForQuestionAnswering(bertlite.BertConfig(**TINY, num_labels=3))
    with pytest.raises(ValueError, match=r"input_ids of shape \(batch, num_choices, seq_len\), got \(2, 5\)"):
        bertlite.BertForMultipleChoice(config)(torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="problem_type='ordinal' is not one of"):
        bertlite.BertConfig(problem_type="ordinal")
    with pytest.raises(ValueError, match="needs num_labels > 1"):
        bertlite.BertConfig(num_labels=1, problem_type="single_label_classification")
    with pytest.warns(UserWarning, match="set is_decoder=True"):
        bertlite.BertLMHeadModel(config)


# --- tying ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["BertForPreTraining", "BertForMaskedLM", "BertLMHeadModel"])
def test_new_model_is_tied_and_embeddings_keep_their_init(name):
    config = bertlite.BertConfig(**{**TINY, **HEAD_CONFIG.get(name, {})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(bertlite, name)(config)
    assert_tied(model)
    # the decoder's init ran before tying, so it did not overwrite the padding row
    assert torch.equal(model.bert.embeddings.word_embeddings.weight[0], torch.zeros(32))
    assert torch.equal(model.cls.predictions.bias, torch.zeros(99))


def test_untied_config_has_separate_decoder():
    hf = make_hf_head("BertForMaskedLM", tie_word_embeddings=False)
    ours = to_ours(hf)
    assert ours.cls.predictions.decoder.weight is not ours.bert.embeddings.word_embeddings.weight
    assert ours.cls.predictions.decoder.bias is not ours.cls.predictions.bias
    inputs = head_inputs("BertForMaskedLM", hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), hf(**inputs))


def test_transformers_mlm_checkpoint_without_decoder_loads_tied(tmp_path):
    hf = make_hf_head("BertForMaskedLM")
    hf.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert "cls.predictions.decoder.weight" not in f.keys()  # what this test is about
    ours = bertlite.BertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert_tied(ours)
    inputs = head_inputs("BertForMaskedLM", hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), hf(**inputs))
    ours.cls.predictions.bias.data.add_(1.0)  # still one tensor after loading
    assert torch.equal(ours.cls.predictions.decoder.bias, ours.cls.predictions.bias)


def write_folder(folder: Path, config: dict, state_dict: dict, fmt: str = "safetensors") -> Path:
    # cloned: safetensors refuses the tied pairs' shared memory
    return write(folder, config, {k: v.clone() for k, v in state_dict.items()}, fmt)


def test_untied_config_still_requires_decoder_weight(tmp_path):
    hf = make_hf_head("BertForMaskedLM", tie_word_embeddings=False)
    state = {k: v for k, v in hf.state_dict().items() if k != "cls.predictions.decoder.weight"}
    folder = write_folder(tmp_path / "untied", hf.config.to_dict(), state)
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): cls.predictions.decoder.weight"):
        bertlite.BertForMaskedLM.from_pretrained(folder)


def test_legacy_bin_with_both_tied_keys_and_only_the_decoder(tmp_path):
    hf = make_hf_head("BertForMaskedLM")
    # old transformers .bin files hold both names of a tied tensor
    both = write_folder(tmp_path / "both", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    ours = bertlite.BertForMaskedLM.from_pretrained(both)
    assert_tied(ours)
    # only the decoder (target) given: it becomes the embeddings too, as in transformers
    state = {k: v for k, v in hf.state_dict().items() if k != "bert.embeddings.word_embeddings.weight"}
    only_decoder = write_folder(tmp_path / "decoder", hf.config.to_dict(), state)
    ours = bertlite.BertForMaskedLM.from_pretrained(only_decoder, attn_implementation="eager")
    assert_tied(ours)
    inputs = head_inputs("BertForMaskedLM", hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), hf(**inputs))


def test_tied_keys_with_different_values_load_untied_like_transformers(tmp_path):
    hf = make_hf_head("BertForMaskedLM")
    state = dict(hf.state_dict())
    state["cls.predictions.decoder.weight"] = state["cls.predictions.decoder.weight"] + 1.0
    folder = write_folder(tmp_path / "differ", hf.config.to_dict(), state)
    with pytest.warns(UserWarning, match="different values for them, so they are loaded untied"):
        ours = bertlite.BertForMaskedLM.from_pretrained(folder, attn_implementation="eager")
    theirs = transformers.BertForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert ours.cls.predictions.decoder.weight is not ours.bert.embeddings.word_embeddings.weight
    inputs = head_inputs("BertForMaskedLM", hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), theirs(**inputs))


# --- loading across classes ---------------------------------------------------------


def loading_info(cls_name: str, folder: Path) -> tuple[transformers.PreTrainedModel, set[str], set[str]]:
    model, info = getattr(transformers, cls_name).from_pretrained(
        folder, output_loading_info=True, attn_implementation="eager"
    )
    return model.eval(), set(info["missing_keys"]), set(info["unexpected_keys"])


def new_keys_warned(caught: list) -> set[str]:
    [message] = [str(w.message) for w in caught if "newly initialised" in str(w.message)]
    return set(message.rsplit(": ", 1)[1].split(", "))


@pytest.mark.parametrize("name", ["BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification"])
def test_base_model_from_head_checkpoint_lists_the_head_keys_as_transformers_does(tmp_path, name):
    make_hf_head(name).save_pretrained(tmp_path)
    pooler = {"add_pooling_layer": False} if name == "BertForMaskedLM" else {}  # an MLM checkpoint has none
    their_info = transformers.BertModel.from_pretrained(tmp_path, output_loading_info=True, **pooler)[1]
    their_missing, their_unexpected = set(their_info["missing_keys"]), set(their_info["unexpected_keys"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, info = bertlite.BertModel.from_pretrained(tmp_path, output_loading_info=True, **pooler)
    assert their_unexpected and set(info["unexpected_keys"]) == their_unexpected  # the head's keys, not used
    assert set(info["missing_keys"]) == their_missing
    assert not [w for w in caught if "cls." in str(w.message) or "classifier" in str(w.message)]  # listed, not warned
    assert model.encoder.layer[0].attention.self.query.weight.abs().sum() > 0


@pytest.mark.parametrize("name", HEADS)
def test_head_from_base_checkpoint_initialises_and_lists_the_head(tmp_path, name):
    base = make_hf_model(**HEAD_CONFIG.get(name, {}))
    base.save_pretrained(tmp_path)
    theirs, their_missing, _ = loading_info(name, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = getattr(bertlite, name).from_pretrained(tmp_path, attn_implementation="eager")
    # the same keys transformers initialises (it lists the tied decoder too; we list its source only)
    tied = set(ours.tied_weights_keys())
    assert new_keys_warned(caught) == their_missing - tied
    assert all(not p.is_meta for p in ours.parameters())
    for key, value in ours.state_dict().items():
        if key.startswith("bert.") and not key.startswith("bert.pooler"):
            torch.testing.assert_close(value, base.state_dict()[key.removeprefix("bert.")], atol=0, rtol=0)
    # transformers' init scheme: normal(0, initializer_range) weights, zero biases, unit LayerNorms
    for key in their_missing - tied:
        value = ours.state_dict()[key]
        if key.endswith("LayerNorm.weight"):
            assert torch.equal(value, torch.ones_like(value))
        elif key.endswith("bias"):
            assert torch.equal(value, torch.zeros_like(value)), key
        elif value.numel() > 50:
            assert 0.005 < value.std().item() < 0.04, key
    if hasattr(ours, "cls") and hasattr(ours.cls, "predictions"):
        assert_tied(ours)


def test_mlm_from_pretraining_checkpoint_ignores_nsp_head(tmp_path):
    hf = make_hf_head("BertForPreTraining")
    hf.save_pretrained(tmp_path)
    theirs, missing, unexpected = loading_info("BertForMaskedLM", tmp_path)
    assert not missing
    with pytest.warns(UserWarning, match="not used, the model has no such head: cls.seq_relationship.bias"):
        ours = bertlite.BertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    inputs = head_inputs("BertForMaskedLM", hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), theirs(**inputs))


def test_classifier_from_mlm_checkpoint_initialises_pooler_and_classifier(tmp_path):
    make_hf_head("BertForMaskedLM").save_pretrained(tmp_path)
    _, their_missing, _ = loading_info("BertForSequenceClassification", tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bertlite.BertForSequenceClassification.from_pretrained(tmp_path)
    assert new_keys_warned(caught) == their_missing
    assert "bert.pooler.dense.weight" in their_missing


def test_bert_model_from_head_checkpoint(tmp_path):
    hf = make_hf_head("BertForPreTraining")
    hf.save_pretrained(tmp_path)
    ours = bertlite.BertModel.from_pretrained(tmp_path, attn_implementation="eager")
    inputs = random_batch(hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), hf.bert(**inputs))


def test_head_checkpoint_without_bert_prefix(tmp_path):
    hf = make_hf_head("BertForTokenClassification")
    state = {k.removeprefix("bert."): v for k, v in hf.state_dict().items()}
    assert "embeddings.word_embeddings.weight" in state and "classifier.weight" in state
    folder = write_folder(tmp_path / "bare", hf.config.to_dict(), state)
    ours = bertlite.BertForTokenClassification.from_pretrained(folder, attn_implementation="eager")
    inputs = head_inputs("BertForTokenClassification", hf.config)
    with torch.no_grad():
        assert_same(ours(**inputs), hf(**inputs))


def test_partly_missing_head_is_an_error(tmp_path):
    hf = make_hf_head("BertForSequenceClassification")
    state = {k: v for k, v in hf.state_dict().items() if k != "classifier.bias"}
    folder = write_folder(tmp_path / "broken", hf.config.to_dict(), state)
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): classifier.bias"):
        bertlite.BertForSequenceClassification.from_pretrained(folder)


def test_wrong_number_of_labels_is_a_shape_error(tmp_path):
    hf = make_hf_head("BertForSequenceClassification", num_labels=3)
    config = {**hf.config.to_dict(), "id2label": {"0": "a", "1": "b"}, "label2id": {"a": 0, "b": 1}}
    folder = write_folder(tmp_path / "labels", config, hf.state_dict())
    with pytest.raises(CheckpointError, match=r"classifier.weight: checkpoint \(3, 32\) in model.safetensors"):
        bertlite.BertForSequenceClassification.from_pretrained(folder)


def test_labels_round_trip_through_config_json(tmp_path):
    hf = make_hf_head("BertForSequenceClassification", id2label={0: "neg", 1: "neu", 2: "pos"})
    hf.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["id2label"] == {"0": "neg", "1": "neu", "2": "pos"}
    ours = bertlite.BertForSequenceClassification.from_pretrained(tmp_path)
    assert ours.config.id2label == {0: "neg", 1: "neu", 2: "pos"} and ours.config.num_labels == 3


def test_missing_embeddings_with_strict_false_are_initialised_once_and_tied(tmp_path):
    hf = make_hf_head("BertForMaskedLM")
    state = {k: v for k, v in hf.state_dict().items() if k != "bert.embeddings.word_embeddings.weight"}
    state.pop("cls.predictions.decoder.weight")
    folder = write_folder(tmp_path / "no_embeddings", hf.config.to_dict(), state)
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): bert.embeddings.word_embeddings.weight\n"):
        bertlite.BertForMaskedLM.from_pretrained(folder)
    with pytest.warns(UserWarning, match="missing keys"):
        ours = bertlite.BertForMaskedLM.from_pretrained(folder, strict=False)
    assert_tied(ours)
    embeddings = ours.bert.embeddings.word_embeddings.weight
    assert not embeddings.is_meta and torch.equal(embeddings[0], torch.zeros(32)) and 0.005 < embeddings.std() < 0.04


FAMILY_MODULES = (
    "heads",
    "roberta",
    "electra",
    "distilbert",
    "mpnet",
    "modernbert_heads",
    "gte_heads",
    "eurobert_heads",
    "nomic_bert_heads",
)


def family_heads() -> list[type]:
    modules = [importlib.import_module(f"bertlite.models.{name}") for name in FAMILY_MODULES]
    return [
        cls
        for module in modules
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and "For" in name and cls.__module__ == module.__name__
    ]


@pytest.mark.parametrize("head", family_heads(), ids=lambda cls: cls.__name__)
def test_each_head_is_its_own_familys_and_still_an_instance_of_berts(head):
    from bertlite.models import roberta
    from bertlite.models.roberta import RobertaForMaskedLM, RobertaForSequenceClassification

    # Its own family's PreTrainedModel and the shared head base, XLM-RoBERTa's and CamemBERT's too.
    task = head.__name__[head.__name__.index("For") :]
    ours = [cls.__name__ for cls in head.__mro__ if cls.__module__.startswith("bertlite")]
    family = ours[0][: -len(task)]
    # The shared encoder core and its classifier heads (models.encoder) are no other family's classes.
    shared = {"EncoderPreTrainedModel", "PooledSequenceClassifier", "DropoutTokenClassifier"}
    assert [name for name in ours if name not in shared] == [
        ours[0],
        f"{family}PreTrainedModel",
        "ModelWithHead",
        "PreTrainedModel",
    ]
    # What callers check (CrossEncoder: BertForSequenceClassification; integrations.Trainer: BertPreTrainedModel)
    # holds as when the heads inherited BERT's (and MPNet's RoBERTa's); the families on a module tree of their own
    # never did.
    if family not in ("ModernBert", "Gte", "EuroBert", "NomicBert"):
        assert issubclass(head, bertlite.BertPreTrainedModel)
        # ElectraForPreTraining is the discriminator, not BERT's pre-training head.
        if hasattr(bertlite, "Bert" + task) and head.__name__ != "ElectraForPreTraining":
            assert issubclass(head, getattr(bertlite, "Bert" + task))
    if family in ("XLMRoberta", "Camembert"):
        assert issubclass(head, getattr(roberta, "Roberta" + task))
        assert issubclass(head, roberta.RobertaPreTrainedModel)
    if head.__name__ in ("MPNetForMaskedLM", "MPNetForSequenceClassification"):
        assert issubclass(head, RobertaForMaskedLM if task == "ForMaskedLM" else RobertaForSequenceClassification)


@pytest.mark.parametrize("head", family_heads(), ids=lambda cls: cls.__name__)
def test_a_head_in_berts_argument_order_binds_its_tasks_one_forward(head):
    from bertlite.models import heads

    shared = {
        "ForSequenceClassification": heads.sequence_classification_forward,
        "ForMaskedLM": heads.masked_lm_forward,
        "ForTokenClassification": heads.token_classification_forward,
        "ForQuestionAnswering": heads.question_answering_forward,
        "ForMultipleChoice": heads.multiple_choice_forward,
    }
    task = head.__name__[head.__name__.index("For") :]
    inputs = ["input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds"]
    if task in shared and list(inspect.signature(head.forward).parameters)[1:6] == inputs:
        assert head.forward is shared[task]
