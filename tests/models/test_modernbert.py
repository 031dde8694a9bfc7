"""ModernBERT against transformers in the same run: the config, the tokenizer, the module tree and keys, eager
bitwise, sdpa and the packed path (rotary positions and the sliding window per sequence) within 1e-5, every head,
save and load both ways, and the Embedder and CrossEncoder against sentence-transformers on tiny folders built here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

import bertlite
from bertlite.config import ModernBertConfig

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
HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")
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


def test_config_is_transformers_and_bad_values_are_named() -> None:
    legacy = dict(num_hidden_layers=4, global_attn_every_n_layers=2, global_rope_theta=1000.0, local_rope_theta=50.0)
    for values in ({}, legacy, {**TINY_MODERNBERT, **CONFIGS["all-sliding-2heads"]}, CONFIGS["biases-every-2nd"]):
        theirs = transformers.ModernBertConfig(**values).to_dict()
        ours = ModernBertConfig.from_dict(values)
        for key in ("_name_or_path", "architectures", "chunk_size_feed_forward", "dtype", "is_encoder_decoder"):
            theirs.pop(key)
        theirs.pop("transformers_version")
        assert ours.to_dict() == theirs
        assert ours.sliding_window == transformers.ModernBertConfig(**values).sliding_window
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
