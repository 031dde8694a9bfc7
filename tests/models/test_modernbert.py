"""ModernBERT against transformers in the same run: the config, the tokenizer, the module tree and keys, eager
bitwise, sdpa and the packed path (rotary positions and the sliding window per sequence) within 1e-5, every head,
save and load both ways, and the Embedder and CrossEncoder against sentence-transformers on tiny folders built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

import bertlite
from bertlite.config import ModernBertConfig
from bertlite.errors import CheckpointError
from bertlite.jobs.prepare import packed_attention_for, ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.layers.gated import GatedProduct, product_works
from bertlite.layers.onednn import OneDNNLinear, linear_works
from bertlite.layers.packing import PackedLayout
from bertlite.models.modernbert import ModernBertModel
from bertlite.quant.int8 import quantize_int8
from tests.models.family import packed

# ModernBERT's shape at a tiny size; the windows (local_attention) are smaller than the inputs.
TINY_MODERNBERT = dict(
    vocab_size=300,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=96,
    local_attention=8,
    pad_token_id=3,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)
# Model shapes checked: the default alternation (every 3rd layer global) with biases off, every 2nd layer global with
# every bias on, a window wider than some inputs, only sliding layers, other rotary bases and activations.
CONFIGS = {
    "tiny": dict(),
    "biases-every-2nd": dict(
        global_attn_every_n_layers=2, attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True
    ),
    "wide-window-gelu_new": dict(local_attention=40, hidden_activation="gelu_new", classifier_activation="silu"),
    "all-sliding-2heads": dict(
        num_attention_heads=2,
        layer_types=["sliding_attention"] * 3,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 500.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 77.0},
        },
        norm_eps=1e-6,
    ),
}
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ids 0..4: cls 1, sep 2, pad 3, as TINY_MODERNBERT's


def make_hf(name: str = "Model", config: str = "tiny", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers ModernBERT model (eager) with every weight far from its init."""
    torch.manual_seed(seed)
    values = {**TINY_MODERNBERT, **CONFIGS[config], **overrides}
    hf_config = transformers.ModernBertConfig(**values, attn_implementation=values.pop("attn", "eager"))
    model = getattr(transformers, "ModernBert" + name)(hf_config)
    with torch.no_grad():
        for param_name, p in model.named_parameters():  # a tied pair is one parameter here, so it stays tied
            p.normal_(1.0 if "norm" in param_name and param_name.endswith("weight") else 0.0, 0.3)
    return model.eval()


def padded_batch(seed: int = 1, width: int = 30) -> dict[str, torch.Tensor]:
    """Three right-padded texts (pad id 3) of 30, 11 and 20 tokens: longer and shorter than the windows."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY_MODERNBERT["vocab_size"], (3, width), generator=g)
    mask = torch.ones_like(ids)
    for row, length in ((1, 11), (2, 20)):
        ids[row, length:], mask[row, length:] = 3, 0
    return {"input_ids": ids, "attention_mask": mask}


def build_tokenizer(folder: Path) -> None:
    """A tiny byte-level BPE tokenizer with ModernBERT's template ([CLS] A [SEP] B [SEP]), saved by transformers."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_MODERNBERT["vocab_size"],
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = ["The quick brown fox jumps over the lazy dog.", "Héllo wörld, naïve café!", "what is a tokenizer?"]
    tokenizer.train_from_iterator(corpus * 20, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        **{f"{name}_token": f"[{name.upper()}]" for name in ("cls", "sep", "pad", "mask", "unk")},
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.save_pretrained(folder)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A tiny random ModernBertModel (transformers, eager) with its tokenizer, saved by transformers."""
    path = tmp_path_factory.mktemp("modernbert")
    make_hf().save_pretrained(path)
    build_tokenizer(path)
    return path


# The keys of answerdotai/ModernBERT-base's config.json (transformers 4.47's): BERT's layer_norm_eps and
# position_embedding_type beside ModernBERT's own, the legacy rotary and alternation keys, reference_compile.
HUB_CONFIG = {
    **dict(architectures=["ModernBertForMaskedLM"], classifier_pooling="mean", global_attn_every_n_layers=3),
    **dict(global_rope_theta=160000.0, local_rope_theta=10000.0, gradient_checkpointing=False, layer_norm_eps=1e-05),
    **dict(norm_eps=1e-05, position_embedding_type="absolute", reference_compile=True, repad_logits_with_grad=False),
    **dict(model_type="modernbert", hidden_activation="gelu", embedding_dropout=0.0, attention_dropout=0.0),
}


def test_config_is_transformers_and_bad_values_are_named() -> None:
    legacy = dict(num_hidden_layers=4, global_attn_every_n_layers=2, global_rope_theta=1000.0, local_rope_theta=50.0)
    bert_names = {**HUB_CONFIG, "layer_norm_eps": 1e-12, "hidden_act": "relu"}  # keys transformers' model never reads
    for values in (
        {},
        legacy,
        HUB_CONFIG,
        bert_names,
        {**TINY_MODERNBERT, **CONFIGS["all-sliding-2heads"]},
        CONFIGS["biases-every-2nd"],
    ):
        theirs = transformers.ModernBertConfig.from_dict(values).to_dict()
        ours = ModernBertConfig.from_dict(values)
        for key in ("_name_or_path", "chunk_size_feed_forward", "dtype", "is_encoder_decoder", "transformers_version"):
            theirs.pop(key)
        theirs.setdefault("architectures", None)
        assert {"architectures": None, **ours.to_dict()} == theirs
        assert ours.sliding_window == transformers.ModernBertConfig.from_dict(values).sliding_window
        assert (ours.norm_eps, ours.hidden_activation) == (theirs["norm_eps"], theirs["hidden_activation"])
    config = ModernBertConfig(norm_eps=1e-6, hidden_activation="gelu_new")
    assert (config.norm_eps, config.layer_norm_eps, config.hidden_activation) == (1e-6, 1e-6, "gelu_new")
    for bad, message in (
        (dict(norm_eps=-1.0), "norm_eps must be positive"),
        (dict(classifier_pooling="max"), "classifier_pooling='max' is not one of"),
        (dict(layer_types=["full_attention"]), "layer_types must list one of"),
        (dict(rope_parameters={"full_attention": {"rope_type": "yarn"}}), "rope_type='yarn' is not implemented"),
        (dict(hidden_activation="nope"), "hidden_activation='nope' is not implemented"),
        (dict(local_attention=0), "local_attention must be an integer >= 2"),
        (dict(attention_bias="yes"), "attention_bias must be true or false"),
        (dict(global_attn_every_n_layers=0), "global_attn_every_n_layers must be a positive integer"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            ModernBertConfig.from_dict(bad)
        assert "\n" not in str(raised.value)


def test_auto_tokenizer_gives_transformers_ids(folder: Path, tmp_path: Path) -> None:
    texts = ["Héllo wörld", "  spaces  and\ttabs ", "naïve café [MASK] fox", "", "ünïcödé 🦊 dog."]
    pairs = [("what is a fox?", "The quick brown fox."), ("café", "")]
    bare = tmp_path / "no-tokenizer-class"  # found by config.json's model_type instead
    bare.mkdir()
    for name in ("tokenizer.json", "config.json"):
        (bare / name).write_bytes((folder / name).read_bytes())
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours = bertlite.AutoTokenizer.from_pretrained(folder)
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 6}):
        assert ours(texts, **kwargs) == dict(theirs(texts, **kwargs))
        firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
        assert ours(firsts, seconds, **kwargs) == dict(theirs(firsts, seconds, **kwargs))
    assert list(ours(texts, padding=True)) == ["input_ids", "attention_mask"]  # no token types, as ModernBERT's
    for text in texts:
        ids = theirs(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)
    # Without tokenizer_config.json (no pad token there either), tokenizer.json runs as it is, without token types.
    theirs, ours = transformers.AutoTokenizer.from_pretrained(bare), bertlite.AutoTokenizer.from_pretrained(bare)
    assert [ours(text)["input_ids"] for text in texts] == [theirs(text)["input_ids"] for text in texts]
    assert ours(*pairs[0])["input_ids"] == theirs(*pairs[0])["input_ids"]
    assert "token_type_ids" not in ours(texts[0])


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model_folder(request, tmp_path_factory) -> tuple[str, Path]:
    """(config name, a folder with that random ModernBertModel saved by transformers)."""
    path = tmp_path_factory.mktemp(f"modernbert-{request.param}")
    make_hf(config=request.param).save_pretrained(path)
    return request.param, path


def test_keys_and_eager_are_transformers_bitwise(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ModernBertModel.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is ModernBertConfig and list(ours.state_dict()) == list(hf.state_dict())
    batch = padded_batch()
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = hf(**batch, **flags), ours(**batch, **flags)
        embeds = ours.embeddings.tok_embeddings(batch["input_ids"][:1])
        from_embeds, expected_embeds = ours(inputs_embeds=embeds), hf(inputs_embeds=embeds)
        no_mask = ours(input_ids=batch["input_ids"]).last_hidden_state
        expected_no_mask = hf(input_ids=batch["input_ids"]).last_hidden_state
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)  # the padding's rows too
    assert len(got.hidden_states) == len(expected.hidden_states) == 4
    for mine, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(from_embeds.last_hidden_state, expected_embeds.last_hidden_state)
    assert torch.equal(no_mask, expected_no_mask)
    assert got.to_tuple()[0] is got.last_hidden_state and len(ours(**batch, return_dict=False)) == 1


def test_left_padding_and_given_positions_are_transformers_bitwise(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ModernBertModel.from_pretrained(path, attn_implementation="eager")
    batch = {k: v.flip(1) for k, v in padded_batch().items()}  # the padding first
    positions = torch.arange(batch["input_ids"].shape[1]).flip(0)[None] + 5
    with torch.no_grad():
        for extra in ({}, {"position_ids": positions}):
            assert torch.equal(ours(**batch, **extra).last_hidden_state, hf(**batch, **extra).last_hidden_state)


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(model_folder, attn) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    hf_sdpa = make_hf(config=config, attn="sdpa")
    ours = ModernBertModel.from_pretrained(path, attn_implementation=attn)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        got = ours(**packed(batch)).last_hidden_state
        first = ours(**packed(batch), first_token_of=torch.tensor([2, 0, 1])).last_hidden_state
        layout = PackedLayout.from_lengths(real.sum(dim=1))
        by_layout = ours(input_ids=batch["input_ids"][real], layout=layout, token_type_ids=torch.zeros(int(real.sum())))
    torch.testing.assert_close(got, expected[real], **TOL)
    torch.testing.assert_close(first, expected[[2, 0, 1], 0], **TOL)
    assert torch.equal(by_layout.last_hidden_state, got)
    if attn in ("sdpa", "eager"):
        with torch.no_grad():
            padded = ours(**batch).last_hidden_state
            expected_sdpa = hf_sdpa(**batch).last_hidden_state
        # The padding's rows are left out: a padded query with no real key in its window differs by kernel.
        torch.testing.assert_close(padded[real], expected[real], **TOL)
        torch.testing.assert_close(padded[real], expected_sdpa[real], **TOL)


def test_token_type_ids_are_ignored_and_packed_keywords_are_checked(model_folder) -> None:
    config, path = model_folder
    ours = ModernBertModel.from_pretrained(path, attn_implementation="eager")
    batch = padded_batch()
    types = torch.ones_like(batch["input_ids"])
    with torch.no_grad():
        expected = make_hf(config=config)(**batch).last_hidden_state
        assert torch.equal(ours(**batch, token_type_ids=types).last_hidden_state, expected)
    with pytest.raises(ValueError, match="attention_mask is not taken with a packed batch"):
        ours(**packed(batch), attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="first_token_of takes a packed batch"):
        ours(**batch, first_token_of=torch.tensor([0]))
    with pytest.raises(TypeError, match="unexpected_keyword"):
        ours(**batch, unexpected_keyword=1)
    with pytest.raises(ValueError, match="ModernBERT has no pooler"):
        ModernBertModel(ours.config, add_pooling_layer=True)


def test_saved_by_bertlite_loads_in_transformers_and_back(model_folder, tmp_path) -> None:
    config, path = model_folder
    ours = ModernBertModel.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "modernbert" and "norm_eps" in saved and "layer_norm_eps" not in saved
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.ModernBertModel and type(again) is ModernBertModel
    assert theirs.config.layer_types == ours.config.layer_types
    assert theirs.config.rope_parameters == ours.config.rope_parameters
    batch = padded_batch()
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes_and_the_layer_count_check(model_folder, tmp_path) -> None:
    config, path = model_folder
    assert type(bertlite.AutoConfig.from_pretrained(path)) is ModernBertConfig
    assert type(bertlite.AutoModel.from_pretrained(path)) is ModernBertModel
    assert type(bertlite.AutoModel.from_config(transformers.ModernBertConfig(**TINY_MODERNBERT))) is ModernBertModel
    assert bertlite.ModernBertModel is ModernBertModel and bertlite.ModernBertConfig is ModernBertConfig
    values = {**TINY_MODERNBERT, **CONFIGS[config], "num_hidden_layers": 2, "layer_types": None}
    with pytest.raises(CheckpointError, match="num_hidden_layers=2, but the checkpoint .* holds 3 encoder layers"):
        ModernBertModel.from_pretrained(path, config=ModernBertConfig(**values))


def head_labels(head: str, batch: dict[str, torch.Tensor], num_labels: int) -> dict[str, torch.Tensor]:
    """Labels for a head's loss: class ids per text, per token with -100 on the padding, or answer spans (one
    outside the sequence, which transformers clamps and ignores)."""
    g = torch.Generator().manual_seed(3)
    b, t = batch["input_ids"].shape
    if head == "ForSequenceClassification":
        return {"labels": torch.randint(0, num_labels, (b,), generator=g)}
    if head == "ForQuestionAnswering":
        return {"start_positions": torch.tensor([0, 3, 400]), "end_positions": torch.tensor([5, 4, 2])}
    labels = torch.randint(0, num_labels, (b, t), generator=g)
    return {"labels": labels.masked_fill(~batch["attention_mask"].bool(), -100)}


@pytest.mark.parametrize("config", ["tiny", "biases-every-2nd"])
@pytest.mark.parametrize(
    ("head", "pooling"), [(head, "cls") for head in HEADS] + [("ForSequenceClassification", "mean")]
)
def test_every_head_loads_and_equals_transformers(head, pooling, config, tmp_path) -> None:
    num_labels = {"ForMaskedLM": TINY_MODERNBERT["vocab_size"], "ForQuestionAnswering": 2}.get(head, 3)
    hf = make_hf(head, config, num_labels=2 if head == "ForQuestionAnswering" else 3, classifier_pooling=pooling)
    hf.save_pretrained(tmp_path)
    ours = getattr(bertlite, "ModernBert" + head).from_pretrained(tmp_path, attn_implementation="eager")
    assert list(ours.state_dict()) == list(hf.state_dict())
    assert type(getattr(bertlite, "AutoModel" + head).from_pretrained(tmp_path)) is type(ours)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    labels = head_labels(head, batch, num_labels)
    fields = ("start_logits", "end_logits") if head == "ForQuestionAnswering" else ("logits",)
    with torch.no_grad():
        expected, got = hf(**batch, **labels), ours(**batch, **labels)
        as_tuple = ours(batch["input_ids"], batch["attention_mask"], return_dict=False)
        packed_out = ours(**packed(batch))
    assert torch.equal(got.loss, expected.loss)
    assert torch.equal(as_tuple[0], getattr(got, fields[0]))
    per_text = head == "ForSequenceClassification"
    for field in fields:
        assert torch.equal(getattr(got, field), getattr(expected, field))
        theirs = getattr(expected, field) if per_text else getattr(expected, field)[real]
        # A packed batch's per-token logits are (N,) rows (QA's (N,) per field), a sequence's are (B, labels).
        torch.testing.assert_close(getattr(packed_out, field), theirs, **TOL)
    ours.save_pretrained(tmp_path / "saved")  # and back into transformers
    theirs = getattr(transformers, "ModernBert" + head).from_pretrained(tmp_path / "saved", attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(getattr(theirs.eval()(**batch), fields[0]), getattr(got, fields[0]))


def test_masked_lm_is_tied_and_trains_as_transformers() -> None:
    hf = make_hf("ForMaskedLM")
    ours = bertlite.ModernBertForMaskedLM(ModernBertConfig(**TINY_MODERNBERT), attn_implementation="eager")
    ours.load_state_dict(hf.state_dict())
    assert ours.decoder.weight is ours.model.embeddings.tok_embeddings.weight
    batch = padded_batch()
    labels = head_labels("ForMaskedLM", batch, TINY_MODERNBERT["vocab_size"])["labels"]
    hf.train(), ours.train()
    ours.gradient_checkpointing_enable()
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")


# --- the jobs against sentence-transformers ------------------------------------------------

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Héllo wörld, naïve café!",
    "what is a tokenizer? " * 6,  # longer than the windows and max_seq_length: cut
    "fox",
    "ünïcödé 🦊 and [MASK] written out",
]
PAIRS = [
    ("what is a fox?", "The quick brown fox jumps over the lazy dog."),
    ("café", "naïve café " * 8),
    ("a long query " * 6, "a short document"),
    ("tokenizer", "what is a tokenizer?"),
]


def save_st_folder(folder: Path, path: Path, pooling: str) -> Path:
    """A sentence-transformers folder of the model in `folder`: Transformer, `pooling`, Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    modules = [Transformer(str(folder), max_seq_length=40), Pooling(32, pooling), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(path))
    return path


@pytest.fixture(scope="module")
def st_folder(folder: Path, tmp_path_factory) -> Path:
    """modernbert-embed-base's shape at a tiny size, saved by sentence-transformers: mean pooling, normalized."""
    return save_st_folder(folder, tmp_path_factory.mktemp("modernbert-st"), "mean")


@pytest.mark.parametrize("pooling", ["mean", "cls"])  # modernbert-embed-base's, gte-modernbert-base's
def test_embedder_gives_sentence_transformers_vectors(folder: Path, st_folder: Path, pooling: str, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    if pooling != "mean":
        st_folder = save_st_folder(folder, tmp_path, pooling)
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert (expected @ expected.T)[np.triu_indices(len(TEXTS), 1)].mean() < 0.95  # the vectors differ
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32", unpad=unpad)
        assert type(embedder.model) is ModernBertModel and embedder.max_length == 40
        np.testing.assert_allclose(embedder.encode(TEXTS), expected, atol=1e-5, rtol=0)
    drop_in = bertlite.SentenceTransformer(str(st_folder), device="cpu", model_kwargs={"dtype": "float32"})
    np.testing.assert_allclose(drop_in.encode(TEXTS), expected, atol=1e-5, rtol=0)


def test_the_cpu_fast_path_matches_transformers_and_eager_undoes_it(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ready(ModernBertModel.from_pretrained(path))
    layer = ours.layers[1]
    fast = linear_works(torch.float32)  # oneDNN's Linear runs here
    assert (type(layer.attn.Wqkv) is OneDNNLinear) == fast and layer.attn.attn_implementation == "auto"
    gated = fast and product_works(torch.float32)  # act(gate) * up in two GEMMs' epilogues (layers.gated)
    assert isinstance(layer.mlp.gated_product, GatedProduct) == gated
    assert (type(layer.mlp.Wi) is OneDNNLinear) == (fast and not gated)
    assert layer.attn.fuses_residual == layer.mlp.fuses_residual == fast  # the residual adds inside Wo's GEMMs
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)
        ours.set_attn_implementation("eager")
        assert type(layer.attn.Wqkv) is torch.nn.Linear and type(layer.mlp.Wi) is torch.nn.Linear
        assert not layer.attn.fuses_residual and not layer.mlp.fuses_residual
        assert torch.equal(ours(**batch).last_hidden_state, expected)
    assert list(ours.state_dict()) == list(hf.state_dict())


@pytest.mark.parametrize("prepare", ["plain", "ready", "int8"])
def test_the_last_layer_computes_only_the_first_tokens_asked_for(model_folder, prepare: str) -> None:
    config, path = model_folder
    ours = ModernBertModel.from_pretrained(path)
    if prepare == "ready":
        ours = ready(ours)
    elif prepare == "int8":
        quantize_int8(ours, kernel="dequantize", alpha=None, compile_quantization=False)
    batch = packed(padded_batch())
    rows_seen: list[int] = []
    hook = ours.layers[-1].mlp.register_forward_hook(lambda _m, args, _o: rows_seen.append(args[0].shape[0]))
    try:
        with torch.no_grad():
            every_row = ours(**batch).last_hidden_state
            first = ours(**batch, first_token_of=torch.tensor([2, 0, 1, 2])).last_hidden_state
    finally:
        hook.remove()
    starts = torch.tensor([0, 30, 41])  # the three texts' first rows (30, 11 and 20 tokens)
    assert rows_seen == [len(every_row), 4]  # the last layer's feed-forward ran on the 4 rows asked for
    torch.testing.assert_close(first, every_row[starts[[2, 0, 1, 2]]], **TOL)


def test_jobs_ready_modernbert_in_float_and_int8(st_folder: Path) -> None:
    embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32")
    assert embedder.model.attn_implementation == "auto"  # float32: one SDPA call per text
    embedder.to(torch.float64)  # moved: the plain modules back, then readied again
    assert embedder.model.attn_implementation == "auto" and embedder.dtype == torch.float64
    assert all(type(layer.attn.Wqkv) is torch.nn.Linear for layer in embedder.model.layers)  # oneDNN takes no float64
    bf16 = bertlite.Embedder.from_pretrained(st_folder, dtype="bfloat16")
    assert bf16.precision == "bfloat16" and (bf16.encode(TEXTS) * embedder.encode(TEXTS)).sum(axis=1).min() >= 0.99
    expected = bertlite.Embedder.from_pretrained(st_folder, dtype="float32").encode(TEXTS)
    int8 = bertlite.Embedder.from_pretrained(st_folder, dtype="int8")
    quantized = {name for name, m in int8.model.named_modules() if type(m).__name__ == "Int8Linear"}
    assert {f"layers.2.{path}" for path in ("attn.Wqkv", "attn.Wo", "mlp.Wi", "mlp.Wo")} <= quantized
    assert int8.precision == "int8" and (int8.encode(TEXTS) * expected).sum(axis=1).min() >= 0.995
    kept = quantize_int8(ModernBertModel.from_pretrained(st_folder), keep_fp32=["layers.0.mlp.Wo"])
    assert type(kept.layers[0].mlp.Wo) is torch.nn.Linear and type(kept.layers[1].mlp.Wo).__name__ == "Int8Linear"


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_cross_encoder_gives_sentence_transformers_scores(folder: Path, pooling: str, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    make_hf("ForSequenceClassification", num_labels=1, classifier_pooling=pooling).save_pretrained(tmp_path)
    build_tokenizer(tmp_path)
    expected = STCrossEncoder(str(tmp_path), device="cpu", max_length=24).predict(PAIRS)
    assert np.ptp(expected) > 1e-3  # the scores differ
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32", max_length=24, unpad=unpad)
        assert type(ours.model) is bertlite.ModernBertForSequenceClassification
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=1e-5, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_packed_and_padded_match_transformers(tmp_path) -> None:
    hf = make_hf(config="biases-every-2nd")
    hf.save_pretrained(tmp_path)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
    on_gpu = {k: v.cuda() for k, v in packed(batch).items()}
    ours = ModernBertModel.from_pretrained(tmp_path, device="cuda", attn_implementation="sdpa")
    fast = ready(ModernBertModel.from_pretrained(tmp_path, dtype="bfloat16", device="cuda"))
    # "varlen" where flash attention runs: the global layers run it, the sliding ones (a window bias) sdpa on the grid.
    assert fast.attn_implementation == (packed_attention_for(torch.device("cuda"), torch.bfloat16, 8) or "sdpa")
    with torch.no_grad():
        float32 = ours(**on_gpu).last_hidden_state.cpu()
        padded = ours(**{k: v.cuda() for k, v in batch.items()}).last_hidden_state.cpu()
        first = ours(**on_gpu, first_token_of=torch.tensor([2, 0, 1], device="cuda")).last_hidden_state.cpu()
        bfloat16 = fast(**on_gpu).last_hidden_state.float().cpu()
    torch.testing.assert_close(float32, expected[real], **TOL)
    torch.testing.assert_close(padded[real], expected[real], **TOL)
    torch.testing.assert_close(first, expected[[2, 0, 1], 0], **TOL)
    assert torch.nn.functional.cosine_similarity(bfloat16, expected[real], dim=-1).min() >= 0.99


def test_sparse_and_multi_vector_encoders_give_sentence_transformers_vectors(tmp_path) -> None:
    from sentence_transformers import MultiVectorEncoder, SparseEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    for name in ("ForMaskedLM", "Model"):
        make_hf(name).save_pretrained(tmp_path / name)
        build_tokenizer(tmp_path / name)
    transformer = Transformer(str(tmp_path / "ForMaskedLM"), max_seq_length=40, transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(tmp_path / "splade"))
    expected = SparseEncoder(str(tmp_path / "splade"), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    ours = bertlite.SparseEncoder.from_pretrained(tmp_path / "splade", dtype="float32")
    assert type(ours.model) is bertlite.ModernBertForMaskedLM
    got = ours.encode(TEXTS).to_dense()
    assert (expected != 0).sum(dim=1).min() > 0
    assert torch.equal(got != 0, expected != 0) and (got - expected).abs().max().item() <= 1e-5
    torch.manual_seed(2)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    with torch.no_grad():
        dense.linear.weight.normal_(0.0, 0.5)
    modules = [
        Transformer(str(tmp_path / "Model"), max_seq_length=40),
        dense,
        MultiVectorMask(skiplist_words=[]),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, device="cpu").save_pretrained(str(tmp_path / "colbert"))
    expected = MultiVectorEncoder(str(tmp_path / "colbert"), device="cpu").encode_document(TEXTS)
    ours = bertlite.MultiVectorEncoder.from_pretrained(tmp_path / "colbert", dtype="float32")
    assert type(ours.model) is ModernBertModel
    got = ours.encode_document(TEXTS)
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert (torch.as_tensor(g) - torch.as_tensor(e)).abs().max().item() <= 1e-5


def test_parity_compares_a_modernbert_folder_with_transformers(folder: Path, tmp_path) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    report = check(folder, texts=[*TEXTS, *PAIRS, "long text " * 200])
    names = {row.name for row in report.rows}
    assert report.ok and {"layers.2.attn", "layers.2.mlp", "final_norm", "last_hidden_state"} <= names
    assert main(["parity", str(folder), "--head", "none"]) == 0
    make_hf("ForSequenceClassification", classifier_pooling="mean").save_pretrained(tmp_path / "classifier")
    build_tokenizer(tmp_path / "classifier")
    report = check(tmp_path / "classifier", texts=[*TEXTS, *PAIRS])
    assert report.ok and {row.name for row in report.rows if row.kind == "logits"} == {"logits"}


def test_transformers_pipelines_run_the_bertlite_heads(folder: Path, tmp_path) -> None:
    tasks = {"ForMaskedLM": "fill-mask", "ForSequenceClassification": "text-classification"}
    for head, task in tasks.items():
        make_hf(head).save_pretrained(tmp_path / head)
        build_tokenizer(tmp_path / head)
        tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / head)
        ours = getattr(bertlite, "ModernBert" + head).from_pretrained(tmp_path / head, attn_implementation="eager")
        text = "the quick brown [MASK] jumps" if task == "fill-mask" else "naïve café in paris"
        eager = {"attn_implementation": "eager"}
        expected = transformers.pipeline(task, model=str(tmp_path / head), device="cpu", model_kwargs=eager)(text)
        assert transformers.pipeline(task, model=ours, tokenizer=tokenizer, device="cpu")(text) == expected


def test_bertlite_embed_on_a_modernbert_folder_gives_sentence_transformers_vectors(st_folder: Path, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    from bertlite.cli import main
    from bertlite.jobs.kinds import detect_kind

    assert detect_kind(st_folder) == "embedding"
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    args = ["embed", str(st_folder), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy")]
    assert main([*args, "--dtype", "float32", "--quiet"]) == 0
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-5, rtol=0)
    assert main([*args, "--dtype", "int8", "--quiet"]) == 0
    assert (np.load(tmp_path / "out.npy") * expected).sum(axis=1).min() >= 0.995


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_multiple_choice_equals_transformers(pooling: str, tmp_path) -> None:
    hf = make_hf("ForMultipleChoice", classifier_pooling=pooling)
    hf.save_pretrained(tmp_path)
    ours = bertlite.ModernBertForMultipleChoice.from_pretrained(tmp_path, attn_implementation="eager")
    assert type(bertlite.AutoModelForMultipleChoice.from_pretrained(tmp_path)) is type(ours)
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = {k: v.view(1, 3, -1).repeat(2, 1, 1) for k, v in padded_batch().items()}  # 2 questions, 3 choices
    batch = {k: v.flip(2) if pooling == "cls" else v for k, v in batch.items()}  # left padding: cls is not column 0
    labels = torch.tensor([2, 0])
    with torch.no_grad():
        expected, got = hf(**batch, labels=labels), ours(**batch, labels=labels)
    # One score per choice: a (1, H) classifier, whose dot product rounds by where its loaded weight sits in memory.
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-6, rtol=0)
    assert got.logits.shape == (2, 3) and got.logits[0, 0] != got.logits[0, 1]
    if pooling == "mean":
        with pytest.raises(ValueError, match="classifier_pooling='mean' needs attention_mask"):
            ours(input_ids=batch["input_ids"])


def test_to_bertlite_and_use_bertlite_take_modernbert(st_folder: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from bertlite.integrations import to_bertlite, use_bertlite

    hf = make_hf("ForMaskedLM")
    twin = to_bertlite(hf, attn_implementation="eager")
    assert (
        type(twin) is bertlite.ModernBertForMaskedLM
        and twin.decoder.weight is twin.model.embeddings.tok_embeddings.weight
    )
    with torch.no_grad():
        assert torch.equal(twin.eval()(**padded_batch()).logits, hf(**padded_batch()).logits)
    model = SentenceTransformer(str(st_folder), device="cpu")
    expected = model.encode(TEXTS, convert_to_numpy=True)
    use_bertlite(model)
    assert any(type(m).__name__ == "ModernBertModel" and m.__module__.startswith("bertlite") for m in model.modules())
    np.testing.assert_allclose(model.encode(TEXTS, convert_to_numpy=True), expected, atol=1e-5, rtol=0)


# --- long texts: each sequence's own window, in chunks -------------------------------------------------------


@pytest.mark.parametrize("chunk", [5, 7, 64])
@pytest.mark.parametrize("attn", ["auto", "per_sequence", "sdpa", "nested", "varlen"])
def test_windowed_attention_in_chunks_matches_transformers(model_folder, attn, chunk, monkeypatch) -> None:
    # Chunks of queries smaller than the texts and than the windows (4 and 20 tokens each side): every boundary
    # case of the keys a chunk reads; lengths in runs of equal ones and alone.
    import bertlite.layers.attention as attention

    monkeypatch.setattr(attention, "WINDOW_CHUNK", chunk)
    config, path = model_folder
    hf, hf_eager = make_hf(config=config, attn="sdpa"), make_hf(config=config)
    ours = ModernBertModel.from_pretrained(path, attn_implementation=attn)
    lengths = torch.tensor([60, 60, 33, 9])
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, TINY_MODERNBERT["vocab_size"], (4, 60), generator=g)
    mask = (torch.arange(60)[None] < lengths[:, None]).long()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
        spread = (hf_eager(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()] - expected).abs()
        got = ours(input_ids=ids[mask.bool()], lengths=lengths).last_hidden_state
    # Within 1e-5 of transformers' sdpa, plus its own spread to its eager path where rounding is amplified (one
    # value here differs by 1.7e-5 between transformers' two kernels); a key read outside a window moves ~0.1.
    assert bool(((got - expected).abs() <= 1e-5 + spread).all()), (got - expected).abs().max()


def test_an_8192_token_text_matches_transformers(tmp_path) -> None:
    hf = make_hf(max_position_embeddings=8192, local_attention=128, attn="sdpa")
    hf.save_pretrained(tmp_path)
    ours = ready(ModernBertModel.from_pretrained(tmp_path))
    ids = torch.randint(5, TINY_MODERNBERT["vocab_size"], (1, 8192), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state[0]
        got = ours(input_ids=ids[0], lengths=torch.tensor([8192])).last_hidden_state
        first = ours(input_ids=ids[0], lengths=torch.tensor([8192]), first_token_of=torch.tensor([0]))
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(first.last_hidden_state, expected[:1], **TOL)


_LONG_PEAK_SCRIPT = """
import sys, torch
from bertlite.jobs.prepare import ready
from bertlite.models.modernbert import ModernBertModel

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024

model = ready(ModernBertModel.from_pretrained(sys.argv[1]))
ids = torch.randint(5, 300, (8192,), generator=torch.Generator().manual_seed(0))
with torch.inference_mode():
    model(input_ids=ids[:300], lengths=torch.tensor([300]))  # every kernel built once, on a short text
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS:")
    model(input_ids=ids, lengths=torch.tensor([8192]))
print(status("VmHWM:") - before)
"""


def test_an_8192_token_text_takes_memory_linear_in_its_tokens(tmp_path) -> None:
    from tests.helpers import run_fresh_without_isa_caps

    # hidden 32, intermediate 40: the activations of 8,192 tokens are a few MiB; one (T, T) float32 grid is 256 MiB.
    make_hf(max_position_embeddings=8192, local_attention=128).save_pretrained(tmp_path)
    result = run_fresh_without_isa_caps(["-c", _LONG_PEAK_SCRIPT, str(tmp_path)], timeout=300)
    growth = float(result.stdout.split()[-1])
    assert growth < 96, f"peak RSS grew {growth:.0f} MiB for one 8,192-token text"
