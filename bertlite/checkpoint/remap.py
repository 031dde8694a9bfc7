"""The weight map: how a checkpoint's keys become the model's, declaratively.

Legacy TF-era names (LayerNorm gamma/beta) are renamed, the `bert.` prefix is added or stripped for the
target class, transformers' derived buffers and other heads' keys are dropped (None), and tensors the
model has no module for are named so the load can refuse them. As in litgpt's convert_hf_checkpoint and
flash-attention's remap_state_dict, the map is tables and one pure function; the maps of further model
families will join it here. No torch import: it maps names and never touches a tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

# Top-level modules of the base model (ELECTRA's embeddings_project too, DistilBERT's transformer, ModernBERT's layers
# and final_norm, EuroBERT's embed_tokens and norm, NomicBERT's emb_ln), and the heads' modules around it (BERT's;
# RoBERTa's masked-LM lm_head; ELECTRA's generator and discriminator heads; DistilBERT's; ModernBERT's head and
# decoder; EuroBERT's dense).
BASE_MODULES = (
    "embeddings.",
    "embeddings_project.",
    "encoder.",
    "pooler.",
    "transformer.",
    "layers.",
    "final_norm.",
    "embed_tokens.",
    "norm.",
    "emb_ln.",
)
HEAD_MODULES = (
    "cls.",
    "classifier.",
    "qa_outputs.",
    "lm_head.",
    "generator_predictions.",
    "generator_lm_head.",
    "discriminator_predictions.",
    "vocab_transform.",
    "vocab_layer_norm.",
    "vocab_projector.",
    "pre_classifier.",
    "head.",
    "decoder.",
    "dense.",
    "lm_predictions.",
)
# Base-model prefixes whose heads own the top-level `pooler.` (DeBERTa's ContextPooler); BERT's is its base model's.
HEAD_POOLER_PREFIXES = ("deberta",)
# Pre-training heads no class here (nor transformers) has a module for, dropped on load as transformers drops them:
# DeBERTa-v3's replaced-token-detection head, by base-model prefix.
DROPPED_HEADS = {"deberta": ("mask_predictions.",)}
# Names a family's checkpoints may hold without a module in the model's config, dropped only when the model has no
# such weight (transformers' _keys_to_ignore_on_load_unexpected): DeBERTa-v3's absolute positions, saved although
# position_biased_input is false.
IGNORED_UNEXPECTED = {"deberta": ("position_embeddings",)}
# A base model's prefix in an original remote-code layout -> its prefix here (GTE's "new": Alibaba-NLP/new-impl).
ORIGINAL_PREFIXES = {"gte": "new."}
# torch parametrizations' names, as a model saved with them holds its weights (jina-embeddings-v3's original layout
# keeps each Linear's and Embedding's task adapters so): the parametrized weight and its first parametrization's
# tensors, here the module's own.
PARAMETRIZATION_NAMES = {
    ".parametrizations.weight.original": ".weight",
    ".parametrizations.weight.0.lora_A": ".lora_A",
    ".parametrizations.weight.0.lora_B": ".lora_B",
}
# Linears a family's checkpoints fuse and its module tree holds apart, as transformers' does, by base-model prefix:
# the fused module's name -> its parts' names, in the order their rows are stacked. The load splits the fused
# tensors and the save concatenates them back, so the files keep the checkpoints' layout.
FUSED_LINEARS: dict[str, dict[str, tuple[str, ...]]] = {
    "gte": {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "up_gate_proj": ("up_proj", "gate_proj")},
    "nomic_bert": {"Wqkv": ("q_proj", "k_proj", "v_proj")},
}
# transformers' non-persistent buffers, saved by old versions: derived, never loaded.
IGNORED_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Tensors that would change the outputs but have no module in the model being
# loaded. Dropping them would give silently wrong numbers, so they fail even with
# strict=False. distance_embedding loads when the config asks for relative positions.
UNSUPPORTED_TENSORS = {
    "distance_embedding": "relative position embeddings, but config.json has no "
    "position_embedding_type relative_key or relative_key_query",
    "crossattention": "cross-attention layers (add_cross_attention=True)",
}


V = TypeVar("V")


def rename_legacy_key(key: str) -> str:
    """Rename a TF-era key (LayerNorm.gamma/beta -> weight/bias) or a parametrized weight's (PARAMETRIZATION_NAMES).

    Args:
        key: a checkpoint key.

    Returns:
        The key with a `.gamma` / `.beta` or parametrization suffix renamed, any other key unchanged.
    """
    for suffix, name in PARAMETRIZATION_NAMES.items():
        if key.endswith(suffix):
            return key[: -len(suffix)] + name
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def split_key(key: str, base_model_prefix: str) -> tuple[str, ...] | None:
    """The keys a fused Linear's tensor splits into (FUSED_LINEARS).

    Args:
        key: a model key ("encoder.layer.0.attention.qkv_proj.weight").
        base_model_prefix: the family's (FUSED_LINEARS' key).

    Returns:
        The parts' keys in row order ("....q_proj.weight", "....k_proj.weight", "....v_proj.weight"), or None for
        a key of no fused Linear.
    """
    module, _, param = key.rpartition(".")
    owner, _, name = module.rpartition(".")
    parts = FUSED_LINEARS.get(base_model_prefix, {}).get(name)
    if parts is None:
        return None
    return tuple(f"{owner}.{part}.{param}" if owner else f"{part}.{param}" for part in parts)


def fused_key(key: str, base_model_prefix: str) -> tuple[str, tuple[str, ...]] | None:
    """The fused key a part's key is saved under, and all its parts' keys: split_key's inverse.

    Args:
        key: a model key ("encoder.layer.0.attention.q_proj.weight").
        base_model_prefix: the family's (FUSED_LINEARS' key).

    Returns:
        (the fused key, the parts' keys in row order), or None for a key of no part.
    """
    module, _, param = key.rpartition(".")
    owner, _, name = module.rpartition(".")
    for fused, parts in FUSED_LINEARS.get(base_model_prefix, {}).items():
        if name in parts:
            whole = f"{owner}.{fused}.{param}" if owner else f"{fused}.{param}"
            return whole, split_key(whole, base_model_prefix)
    return None


def remap_key(key: str, *, base_model_prefix: str = "bert", with_prefix: bool = False) -> str | None:
    """Map a checkpoint key to its canonical name for the target model.

    An original layout's base-model prefix (ORIGINAL_PREFIXES) reads as the model's. Unknown keys pass through so
    the strict check can report them.

    Args:
        key: a checkpoint key (legacy gamma/beta names are renamed).
        base_model_prefix: the base model's attribute in a head class (default "bert").
        with_prefix: False targets a BertModel: the `bert.` prefix is stripped and the heads' keys are
            dropped. True targets a head class, whose base model lives under `bert.`.

    Returns:
        The canonical key, or None to drop it.
    """
    prefix = base_model_prefix + "."
    key = rename_legacy_key(key)
    original = ORIGINAL_PREFIXES.get(base_model_prefix)
    if original is not None and key.startswith(original):
        key = prefix + key[len(original) :]
    bare = key[len(prefix) :] if key.startswith(prefix) else key
    if bare in IGNORED_BUFFERS or bare.startswith(DROPPED_HEADS.get(base_model_prefix, ())):
        return None
    head_pooler = base_model_prefix in HEAD_POOLER_PREFIXES and bare.startswith("pooler.")
    if with_prefix:
        return prefix + bare if bare.startswith(BASE_MODULES) and not head_pooler else key
    return None if key.startswith(HEAD_MODULES) or head_pooler else bare


def remap_state_dict(
    state_dict: Mapping[str, V], *, base_model_prefix: str = "bert", with_prefix: bool = False
) -> dict[str, V]:
    """Apply remap_key to a whole state_dict.

    Args:
        state_dict: checkpoint keys to values (tensors or anything else; values are not touched).
        base_model_prefix, with_prefix: as in remap_key.

    Returns:
        A new dict with the canonical keys, the dropped keys left out.
    """
    out: dict[str, V] = {}
    for key, value in state_dict.items():
        new_key = remap_key(key, base_model_prefix=base_model_prefix, with_prefix=with_prefix)
        if new_key is not None:
            out[new_key] = value
    return out
