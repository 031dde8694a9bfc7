"""DeBERTa-v2/v3 against transformers' native module in the same run: the config, the tokenizer (a SentencePiece
Unigram in tokenizer.json), the module tree and keys, eager bitwise, sdpa and every packed attention within 1e-5,
every head (both masked-LM layouts), save and load both ways, `bertlite parity`, the Embedder and CrossEncoder
against sentence-transformers on tiny folders built here, zero-shot NLI through transformers' pipeline, a guard's
labels through the server's /predict, and a packed text's bits whatever shares its batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import DebertaV2Config
from bertlite.jobs.batches import shape_tokens
from bertlite.jobs.prepare import ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.layers.onednn import FusedQKV, OneDNNLinear, linear_works
from bertlite.models.deberta_v2 import DebertaV2Model
from bertlite.quant.int8 import quantize_int8
from tests.models.family import packed, save_st_folder, saved_keys

TINY_DEBERTA = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)
# Model shapes checked: DeBERTa-v3's (log buckets, shared keys, c2p|p2c, LayerNorm'd table, no absolute positions
# or token types), DeBERTa-v2's older form (separate pos_key_proj/pos_query_proj, no buckets, absolute positions
# and token types) and plain BERT-like DeBERTa (no relative attention).
CONFIGS = {
    "v3": dict(
        relative_attention=True,
        position_buckets=8,
        max_relative_positions=64,
        pos_att_type="p2c|c2p",
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
        type_vocab_size=0,
    ),
    "v2-separate": dict(
        relative_attention=True,
        max_relative_positions=16,
        pos_att_type=["c2p", "p2c"],
        type_vocab_size=2,
        hidden_act="gelu_new",
    ),
    "absolute": dict(type_vocab_size=2, pos_att_type=["c2p"]),
}
# deberta-v2-xlarge's: v3's attention and a convolution over the embeddings added to the first layer's output.
CONFIGS["xlarge-conv"] = {**CONFIGS["v3"], "conv_kernel_size": 3, "conv_act": "gelu"}
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = (
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
)


def make_hf(name: str = "Model", config: str = "v3", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers DeBERTa-v2 model (eager) with every weight far from its init."""
    torch.manual_seed(seed)
    values = {**TINY_DEBERTA, **CONFIGS[config], **overrides}
    hf_config = transformers.DebertaV2Config(**values, attn_implementation="eager")
    model = getattr(transformers, "DebertaV2" + name)(hf_config)
    with torch.no_grad():
        for param_name, p in model.named_parameters():  # a tied pair is one parameter here, so it stays tied
            is_norm = "layernorm" in param_name.lower() and param_name.endswith("weight")
            p.normal_(1.0 if is_norm else 0.0, 0.3)
    return model.eval()


def padded_batch(seed: int = 1, width: int = 30, types: bool = True) -> dict[str, torch.Tensor]:
    """Three right-padded texts (pad id 0) of 30, 11 and 20 tokens, with token types 0 and 1 in the first."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, TINY_DEBERTA["vocab_size"], (3, width), generator=g)
    mask = torch.ones_like(ids)
    for row, length in ((1, 11), (2, 20)):
        ids[row, length:], mask[row, length:] = 0, 0
    batch = {"input_ids": ids, "attention_mask": mask}
    if types:
        batch["token_type_ids"] = torch.zeros_like(ids)
        batch["token_type_ids"][0, 6:] = 1
    return batch


def batch_for(config: str) -> dict[str, torch.Tensor]:
    return padded_batch(types=CONFIGS[config].get("type_vocab_size", 0) > 0)


def build_tokenizer(folder: Path) -> None:
    """transformers' DebertaV2Tokenizer on a small Unigram vocabulary, saved as tokenizer.json (pad id 0)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["the", "list", "of", "items", "sort", "dict", "by", "value", "json", "key", "what", "is", "a"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = [(piece, 0.0) for piece in specials]
    vocab += [("▁" + w, -2.0) for w in words] + [("▁", -3.0)] + [(c, -4.0) for c in letters]
    vocab += [(p, -5.0) for p in ("!", ",", "?", ".")]
    tokenizer = transformers.DebertaV2Tokenizer(vocab=vocab)
    tokenizer.save_pretrained(folder)
    assert len(tokenizer) <= TINY_DEBERTA["vocab_size"]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model_folder(request, tmp_path_factory) -> tuple[str, Path]:
    """(config name, a folder with that random DebertaV2Model saved by transformers)."""
    path = tmp_path_factory.mktemp(f"deberta-{request.param}")
    make_hf(config=request.param).save_pretrained(path)
    build_tokenizer(path)
    return request.param, path


def test_config_is_transformers_and_bad_values_are_named() -> None:
    for values in ({}, TINY_DEBERTA, *({**TINY_DEBERTA, **c} for c in CONFIGS.values())):
        theirs = transformers.DebertaV2Config.from_dict(values)
        ours = DebertaV2Config.from_dict(values)
        for key in ("pos_att_type", "type_vocab_size", "layer_norm_eps", "vocab_size", "pooler_hidden_size"):
            assert getattr(ours, key) == getattr(theirs, key), key
    assert DebertaV2Config(**TINY_DEBERTA, **CONFIGS["v3"]).relative_span == 8
    for bad, message in (
        (dict(conv_kernel_size=2), "conv_kernel_size=2: the convolution layer takes an odd kernel"),
        (dict(conv_kernel_size=3, conv_groups=5), "conv_groups=5 must divide hidden_size=1536"),
        (dict(conv_kernel_size=3, conv_act="nope"), "conv_act='nope' is not implemented"),
        (dict(pos_att_type="c2p|x2y"), r"pos_att_type: \['x2y'\] unknown"),
        (dict(hidden_act="nope"), "hidden_act='nope' is not implemented"),
        (dict(model_type="bert"), "model_type='bert' is not a DebertaV2 config"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            DebertaV2Config.from_dict(bad)
        assert "\n" not in str(raised.value)


def test_auto_tokenizer_gives_transformers_ids(model_folder) -> None:
    _, folder = model_folder
    texts = ["the list of items", "  spaces  and\ttabs ", "sort a [MASK] by value", "", "ünïcödé 🦊 json."]
    pairs = [("what is a list?", "the list of items"), ("dict", "")]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours = bertlite.AutoTokenizer.from_pretrained(folder)
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 6}):
        assert ours(texts, **kwargs) == dict(theirs(texts, **kwargs))
        firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
        assert ours(firsts, seconds, **kwargs) == dict(theirs(firsts, seconds, **kwargs))
    for text in texts:
        ids = theirs(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


def test_keys_and_eager_are_transformers_bitwise(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = DebertaV2Model.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is DebertaV2Config
    assert sorted(ours.state_dict()) == saved_keys(path)
    batch = batch_for(config)
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = hf(**batch, **flags), ours(**batch, **flags)
        embeds = ours.embeddings.word_embeddings(batch["input_ids"][:1])
        from_embeds, expected_embeds = ours(inputs_embeds=embeds), hf(inputs_embeds=embeds)
        no_mask = ours(input_ids=batch["input_ids"]).last_hidden_state
        expected_no_mask = hf(input_ids=batch["input_ids"]).last_hidden_state
        positions = torch.arange(30).flip(0)[None] + 5
        given = ours(**batch, position_ids=positions).last_hidden_state
        expected_given = hf(**batch, position_ids=positions).last_hidden_state
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)  # the padding's rows too
    assert len(got.hidden_states) == len(expected.hidden_states) == 3
    for mine, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(from_embeds.last_hidden_state, expected_embeds.last_hidden_state)
    assert torch.equal(no_mask, expected_no_mask) and torch.equal(given, expected_given)
    assert got.pooler_output is None and len(ours(**batch, return_dict=False)) == 1


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(model_folder, attn) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = DebertaV2Model.from_pretrained(path, attn_implementation=attn)
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        got = ours(**packed(batch)).last_hidden_state
        first = ours(**packed(batch), first_token_of=torch.tensor([2, 0, 1])).last_hidden_state
        padded = ours(**batch).last_hidden_state
    torch.testing.assert_close(got, expected[real], **TOL)
    torch.testing.assert_close(first, expected[[2, 0, 1], 0], **TOL)
    torch.testing.assert_close(padded, expected, **TOL)  # the padding's rows too


def test_packed_keywords_are_checked(model_folder) -> None:
    _, path = model_folder
    ours = DebertaV2Model.from_pretrained(path, attn_implementation="eager")
    batch = padded_batch()
    with pytest.raises(ValueError, match="attention_mask is not taken with a packed batch"):
        ours(**packed(batch), attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="first_token_of takes a packed batch"):
        ours(**batch, first_token_of=torch.tensor([0]))
    with pytest.raises(ValueError, match="not with output_attentions"):
        ours(**packed(batch), first_token_of=torch.tensor([0]), output_attentions=True)
    with pytest.raises(TypeError, match="unexpected_keyword"):
        ours(**batch, unexpected_keyword=1)


def test_a_packed_batch_gives_each_texts_attentions_on_the_padded_grid(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = DebertaV2Model.from_pretrained(path, attn_implementation="sdpa")
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch, output_attentions=True)
        got = ours(**packed(batch), output_attentions=True)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state[real], **TOL)
    keep = real[:, None, :, None]  # the rows of real queries; padding keys have probability 0 in both
    assert len(got.attentions) == len(expected.attentions) == 2
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert mine.shape == theirs.shape and not mine[~keep.expand_as(mine)].any()
        torch.testing.assert_close(mine, theirs * keep, **TOL)


def test_saved_by_bertlite_loads_in_transformers_and_back(model_folder, tmp_path) -> None:
    config, path = model_folder
    ours = DebertaV2Model.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "deberta-v2" and "position_embedding_type" not in saved
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.DebertaV2Model and type(again) is DebertaV2Model
    assert theirs.config.pos_att_type == ours.config.pos_att_type
    batch = batch_for(config)
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes(model_folder) -> None:
    _, path = model_folder
    assert type(bertlite.AutoConfig.from_pretrained(path)) is DebertaV2Config
    assert type(bertlite.AutoModel.from_pretrained(path)) is DebertaV2Model
    assert type(bertlite.AutoModel.from_config(transformers.DebertaV2Config(**TINY_DEBERTA))) is DebertaV2Model
    assert bertlite.DebertaV2Model is DebertaV2Model and bertlite.DebertaV2Config is DebertaV2Config


def head_labels(head: str, batch: dict[str, torch.Tensor], num_labels: int) -> dict[str, torch.Tensor]:
    """Labels for a head's loss: class ids per text, per token with -100 on the padding, or answer spans."""
    g = torch.Generator().manual_seed(3)
    b, t = batch["input_ids"].shape[:2]
    if head == "ForSequenceClassification":
        return {"labels": torch.randint(0, num_labels, (b,), generator=g)}
    if head == "ForMultipleChoice":
        return {"labels": torch.tensor([1])}
    if head == "ForQuestionAnswering":
        return {"start_positions": torch.tensor([1, 3, 40]), "end_positions": torch.tensor([4, 9, 2])}
    labels = torch.randint(0, num_labels, (b, t), generator=g)
    return {"labels": labels.masked_fill(~batch["attention_mask"].bool(), -100)}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("head", [*HEADS, "ForMaskedLM-new"])
def test_every_head_loads_and_equals_transformers(head, config, tmp_path) -> None:
    name, legacy = head.removesuffix("-new"), not head.endswith("-new")
    num_labels = {"ForMaskedLM": TINY_DEBERTA["vocab_size"], "ForQuestionAnswering": 2}.get(name, 3)
    hf = make_hf(name, config, num_labels=min(num_labels, 3), legacy=legacy)
    hf.save_pretrained(tmp_path)
    ours = getattr(bertlite, "DebertaV2" + name).from_pretrained(tmp_path, attn_implementation="eager")
    assert sorted(set(ours.state_dict()) - set(ours.tied_weights_keys())) == saved_keys(tmp_path)  # tied: saved once
    assert type(getattr(bertlite, "AutoModel" + name).from_pretrained(tmp_path)) is type(ours)
    batch = batch_for(config)
    if name == "ForMultipleChoice":  # one question, three choices
        batch = {key: value[None] for key, value in batch.items()}
    labels = head_labels(name, batch, num_labels)
    with torch.no_grad():
        expected, got = hf(**batch, **labels), ours(**batch, **labels)
    fields = ("start_logits", "end_logits") if name == "ForQuestionAnswering" else ("logits",)
    if name == "ForMultipleChoice":
        # Its one-output classifier is a GEMV on a weight read in place from the file, whose alignment (not 64
        # bytes) picks another CPU kernel than transformers' copy: the last bit may differ.
        torch.testing.assert_close(got.logits, expected.logits, atol=1e-6, rtol=0)
    else:
        assert torch.equal(got.loss, expected.loss)
        for field in fields:
            assert torch.equal(getattr(got, field), getattr(expected, field))
    if name in ("ForSequenceClassification", "ForTokenClassification", "ForMaskedLM"):
        real = batch["attention_mask"].bool()
        with torch.no_grad():
            packed_out = ours(**packed(batch))
        theirs = expected.logits if name == "ForSequenceClassification" else expected.logits[real]
        torch.testing.assert_close(packed_out.logits, theirs, **TOL)
    ours.save_pretrained(tmp_path / "saved")  # and back into transformers
    theirs = getattr(transformers, "DebertaV2" + name).from_pretrained(tmp_path / "saved", attn_implementation="eager")
    with torch.no_grad():
        again = getattr(theirs.eval()(**batch), fields[0])
    if name == "ForMultipleChoice":
        torch.testing.assert_close(again, got.logits, atol=1e-6, rtol=0)
    else:
        assert torch.equal(again, getattr(got, fields[0]))


def test_sequence_classification_loss_is_deberta_s(tmp_path) -> None:
    # Without problem_type DeBERTa's loss skips negative labels and takes label distributions as soft labels.
    hf = make_hf("ForSequenceClassification", num_labels=3)
    hf.save_pretrained(tmp_path)
    ours = bertlite.DebertaV2ForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    batch = padded_batch(types=False)
    soft = torch.softmax(torch.randn(3, 3, generator=torch.Generator().manual_seed(2)), dim=-1)
    for labels in (torch.tensor([2, -1, 0]), torch.tensor([-1, -1, -1]), soft):
        with torch.no_grad():
            expected, got = hf(**batch, labels=labels), ours(**batch, labels=labels)
        assert torch.equal(got.loss, expected.loss) and ours.config.problem_type is None
    ours.config.problem_type = "multi_label_classification"
    with torch.no_grad():  # a problem_type set: the shared loss
        got = ours(**batch, labels=(soft > 0.3).float(), return_dict=False)
        expected = torch.nn.functional.binary_cross_entropy_with_logits(got[1], (soft > 0.3).float())
    assert len(got) == 2 and torch.equal(got[0], expected)


def test_masked_lm_is_tied_and_trains_as_transformers(tmp_path) -> None:
    hf = make_hf("ForMaskedLM")
    hf.save_pretrained(tmp_path)
    ours = bertlite.DebertaV2ForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    predictions = ours.cls.predictions
    assert predictions.decoder.weight is ours.deberta.embeddings.word_embeddings.weight
    assert predictions.decoder.bias is predictions.bias
    batch = padded_batch(types=False)
    labels = head_labels("ForMaskedLM", batch, TINY_DEBERTA["vocab_size"])["labels"]
    hf.train(), ours.train()
    ours.gradient_checkpointing_enable()
    torch.manual_seed(5)
    hf.config.hidden_dropout_prob = 0.0
    for module in (*hf.modules(), *ours.modules()):  # dropout off: the two draw their masks in other orders
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")


def test_the_replaced_token_detection_head_is_dropped_on_load(tmp_path) -> None:
    # DeBERTa-v3's hub checkpoints keep the discriminator's mask_predictions.*, which transformers drops too.
    from safetensors.torch import load_file, save_file

    make_hf("ForMaskedLM").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["mask_predictions.dense.weight"] = torch.zeros(32, 32)
    tensors["mask_predictions.classifier.bias"] = torch.zeros(1)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    theirs = transformers.DebertaV2ForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ours = bertlite.DebertaV2ForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    base = bertlite.AutoModel.from_pretrained(tmp_path, attn_implementation="eager")
    batch = padded_batch(types=False)
    with torch.no_grad():
        assert torch.equal(ours(**batch).logits, theirs(**batch).logits)
        assert torch.equal(base(**batch).last_hidden_state, theirs.deberta(**batch).last_hidden_state)


def test_unused_absolute_positions_are_dropped_as_transformers_drops_them(tmp_path) -> None:
    # DeBERTa-v3's hub checkpoints keep embeddings.position_embeddings although position_biased_input is false.
    from safetensors.torch import load_file, save_file

    make_hf("ForSequenceClassification").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["deberta.embeddings.position_embeddings.weight"] = torch.ones(64, 32)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    theirs, their_info = transformers.DebertaV2ForSequenceClassification.from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    ours, our_info = bertlite.DebertaV2ForSequenceClassification.from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    base = bertlite.AutoModel.from_pretrained(tmp_path, attn_implementation="eager")
    assert list(our_info["unexpected_keys"]) == list(their_info["unexpected_keys"]) == []
    assert "embeddings.position_embeddings.weight" not in base.state_dict()
    batch = padded_batch(types=False)
    with torch.no_grad():
        assert torch.equal(ours(**batch).logits, theirs.eval()(**batch).logits)
        assert torch.equal(base(**batch).last_hidden_state, theirs.deberta(**batch).last_hidden_state)


def test_absolute_positions_the_config_uses_still_load(tmp_path) -> None:
    # The name is dropped only where the model has no such weight: with position_biased_input it is read.
    make_hf(config="v2-separate").save_pretrained(tmp_path)
    theirs = transformers.DebertaV2Model.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ours = bertlite.DebertaV2Model.from_pretrained(tmp_path, attn_implementation="eager")
    their_table = theirs.embeddings.position_embeddings.weight
    assert torch.equal(ours.embeddings.position_embeddings.weight, their_table)


def test_the_cpu_fast_path_and_int8_match_transformers_and_eager_undoes_them(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ready(DebertaV2Model.from_pretrained(path))
    attention = ours.encoder.layer[1].attention
    fast = linear_works(torch.float32)  # oneDNN's Linear runs here
    assert (type(attention.self.qkv) is FusedQKV) == fast
    assert (type(attention.output.dense) is OneDNNLinear) == fast
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)
        ours.set_attn_implementation("eager")
        assert attention.self.qkv is None and type(attention.output.dense) is torch.nn.Linear
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        int8 = quantize_int8(DebertaV2Model.from_pretrained(path), kernel="dequantize", compile_quantization=False)
        low = int8(**packed(batch)).last_hidden_state
    # share_att_key's table projections run through the quantized q|k|v, as the tokens' do.
    assert type(int8.encoder.layer[0].attention.self.qkv).__name__ == "Int8Linear"
    # Random weights far from any trained model's: int8 keeps the rows' direction, not 1e-5.
    assert torch.nn.functional.cosine_similarity(low, expected[real], dim=-1).mean() >= 0.99


# --- the jobs against sentence-transformers ------------------------------------------------

TEXTS = ["the list of items", "sort a dict by value", "json key value items " * 4, "zebra", "Café, naïve!"]
PAIRS = [("what is a list?", "the list of items"), ("dict", "sort a dict by value " * 5), ("key", "what is a key")]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embedder_gives_sentence_transformers_vectors(model_folder, pooling: str, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    _, folder = model_folder
    st_folder = save_st_folder(folder, tmp_path / "st", pooling)
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert (expected @ expected.T)[np.triu_indices(len(TEXTS), 1)].min() < 0.99  # the vectors differ
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32", unpad=unpad)
        assert type(embedder.model) is DebertaV2Model and embedder.max_length == 24
        np.testing.assert_allclose(embedder.encode(TEXTS), expected, atol=1e-5, rtol=0)


def test_an_int8_embedder_keeps_sentence_transformers_directions(model_folder, tmp_path) -> None:
    # Calibration sees the relative position table go through query/key beside the tokens.
    from sentence_transformers import SentenceTransformer

    _, folder = model_folder
    st_folder = save_st_folder(folder, tmp_path / "st", "mean")
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="int8")
    assert type(embedder.model.encoder.layer[0].intermediate.dense).__name__ == "Int8Linear"
    assert (embedder.encode(TEXTS) * expected).sum(axis=1).min() >= 0.99


def test_sparse_encoder_gives_sentence_transformers_vectors(tmp_path) -> None:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    make_hf("ForMaskedLM").save_pretrained(tmp_path / "mlm")
    build_tokenizer(tmp_path / "mlm")
    transformer = Transformer(str(tmp_path / "mlm"), max_seq_length=24, transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(tmp_path / "splade"))
    expected = SparseEncoder(str(tmp_path / "splade"), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    for unpad in (True, False):
        ours = bertlite.SparseEncoder.from_pretrained(tmp_path / "splade", dtype="float32", unpad=unpad)
        assert type(ours.model) is bertlite.DebertaV2ForMaskedLM
        got = ours.encode(TEXTS).to_dense()
        assert (expected != 0).sum(dim=1).min() > 0
        assert torch.equal(got != 0, expected != 0) and (got - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_cross_encoder_gives_sentence_transformers_scores(config, tmp_path: Path) -> None:
    # The prompt-injection guards and NLI rerankers: DeBERTa-v3 sequence classifiers.
    from sentence_transformers import CrossEncoder as STCrossEncoder

    make_hf("ForSequenceClassification", config, num_labels=3).save_pretrained(tmp_path)
    build_tokenizer(tmp_path)
    expected = STCrossEncoder(str(tmp_path), device="cpu", max_length=24).predict(PAIRS)
    assert np.ptp(expected) > 1e-3  # the scores differ
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32", max_length=24, unpad=unpad)
        assert type(ours.model) is bertlite.DebertaV2ForSequenceClassification
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=1e-5, rtol=0)


def test_parity_compares_a_deberta_folder_with_transformers(model_folder, tmp_path) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    _, folder = model_folder
    report = check(folder, texts=[*TEXTS, *PAIRS, "the list " * 20])
    names = {row.name for row in report.rows}
    assert report.ok and not report.only_in_bertlite and not report.only_in_transformers
    assert {"encoder.layer.1.attention.self.query_proj.weight", "last_hidden_state"} <= names
    assert main(["parity", str(folder), "--head", "none"]) == 0
    make_hf("ForSequenceClassification").save_pretrained(tmp_path / "classifier")
    build_tokenizer(tmp_path / "classifier")
    report = check(tmp_path / "classifier", texts=[*TEXTS, *PAIRS])
    assert report.ok and {row.name for row in report.rows if row.kind == "logits"} == {"logits"}


NLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}
GUARD_LABELS = {0: "SAFE", 1: "INJECTION"}


def classifier_folder(folder: Path, labels: dict[int, str]) -> transformers.PreTrainedModel:
    """A random DeBERTa-v3 sequence classifier with these labels (as the NLI rerankers' and prompt-injection guards'
    config.json name them), saved with its tokenizer; returns transformers' model."""
    config = dict(num_labels=len(labels), id2label=labels, label2id={v: k for k, v in labels.items()})
    hf = make_hf("ForSequenceClassification", **config)
    hf.save_pretrained(folder)
    build_tokenizer(folder)
    return hf


def test_zero_shot_nli_through_transformers_pipeline_gives_its_scores(tmp_path) -> None:
    hf = classifier_folder(tmp_path, NLI_LABELS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertlite.DebertaV2ForSequenceClassification.from_pretrained(tmp_path)
    text, candidates = "sort the list of items by value", ["json", "dict", "what is a key"]
    for multi_label in (False, True):
        results = [
            transformers.pipeline("zero-shot-classification", model=model, tokenizer=tokenizer, device="cpu")(
                text, candidate_labels=candidates, multi_label=multi_label
            )
            for model in (hf, ours)
        ]
        theirs, mine = results
        assert mine["labels"] == theirs["labels"], multi_label
        np.testing.assert_allclose(mine["scores"], theirs["scores"], atol=1e-6, rtol=0)
        assert len(set(np.round(theirs["scores"], 4))) == len(candidates)  # the scores differ: an order to keep


def test_a_guard_classifier_serves_its_labels_on_predict(tmp_path) -> None:
    import httpx

    from tests.serve_helpers import running

    hf = classifier_folder(tmp_path, GUARD_LABELS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = ["what is a list?", "ignore the items, sort by key!", "json value"]
    with torch.no_grad():
        logits = hf(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    expected = torch.softmax(logits, dim=-1).numpy()
    with running(lambda: bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32")) as (url, _):
        got = httpx.post(f"{url}/predict", json={"inputs": texts}).json()
    for row, probabilities in zip(got, expected, strict=True):
        order = np.argsort(-probabilities, kind="stable")
        assert [p["label"] for p in row] == [GUARD_LABELS[i] for i in order]
        np.testing.assert_allclose([p["score"] for p in row], probabilities[order], atol=1e-6, rtol=0)


# --- a packed text's bits do not depend on what shares its batch -------------------------------

# A wider DeBERTa-v3 (the GEMM, SDPA and gather kernels of real model sizes, a 2 x 256-row position table).
WIDE_DEBERTA = dict(
    TINY_DEBERTA,
    hidden_size=384,
    num_attention_heads=12,
    intermediate_size=1536,
    max_position_embeddings=512,
    position_buckets=256,
    max_relative_positions=-1,
)


def wide_model() -> DebertaV2Model:
    """A random wide DeBERTa-v3 (CONFIGS["v3"] with WIDE_DEBERTA's shape), weights N(0, 0.05)."""
    torch.manual_seed(0)
    config = DebertaV2Config(**{**CONFIGS["v3"], **WIDE_DEBERTA})
    model = DebertaV2Model(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0, 0.1) if name.endswith("LayerNorm.weight") else p.normal_(0.0, 0.05)
    return model.eval()


def packed_on_grid(parts: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The texts packed as the jobs pack them: a filler text of [PAD] brings the rows to one of shape_tokens' counts
    (whole 8-row blocks, on which a GEMM rounds a row alike whatever else is in the batch)."""
    lengths = [len(part) for part in parts]
    filler = shape_tokens(sum(lengths)) - sum(lengths)
    if filler:
        parts, lengths = [*parts, torch.zeros(filler, dtype=torch.long)], [*lengths, filler]
    return {"input_ids": torch.cat(parts), "lengths": torch.tensor(lengths)}


@pytest.mark.parametrize("optimized", [False, True], ids=["plain", "ready"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("config", [*sorted(CONFIGS), "wide"])
def test_a_packed_texts_bits_do_not_depend_on_its_batch(config, attn, optimized, tmp_path) -> None:
    # The text (11 tokens) alone, then first, inside and last in runs of equal-length texts, beside shorter and
    # longer ones (a longer one widens the batch's relative positions).
    if config == "wide":
        model = wide_model()
    else:
        make_hf(config=config).save_pretrained(tmp_path)
        model = DebertaV2Model.from_pretrained(tmp_path)
    model.set_attn_implementation(attn)
    if optimized:
        ready(model)
    g = torch.Generator().manual_seed(4)
    vocab = model.config.vocab_size
    text = torch.randint(7, vocab, (11,), generator=g)
    batches = ([11, 11, 11], [3, 11, 11, 40], [11, 20, 5], [40, 11, 11, 11, 2], [11, 60, 11], [11] * 9)
    with torch.no_grad():
        alone = model(**packed_on_grid([text])).last_hidden_state[:11]
        for lengths in batches:
            parts = [text if n == 11 else torch.randint(7, vocab, (n,), generator=g) for n in lengths]
            out = model(**packed_on_grid(parts)).last_hidden_state
            for start, n in zip(np.cumsum([0, *lengths[:-1]]), lengths, strict=True):
                if n == 11:
                    assert torch.equal(out[start : start + 11], alone), (lengths, start)
        padded = model(input_ids=text[None]).last_hidden_state[0]
    torch.testing.assert_close(alone, padded, **TOL)


def test_an_embedders_vectors_do_not_depend_on_its_batch(model_folder, tmp_path) -> None:
    _, folder = model_folder
    embedder = bertlite.Embedder.from_pretrained(save_st_folder(folder, tmp_path / "st", "mean"), dtype="float32")
    texts = [*TEXTS, "the list of items", "sort a dict by value", *TEXTS[::-1]]  # equal lengths side by side
    together = embedder.encode(texts)
    for i, text in enumerate(texts):
        assert np.array_equal(embedder.encode([text])[0], together[i]), text
