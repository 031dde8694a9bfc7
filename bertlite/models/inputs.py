"""Input checks that run before any kernel: a wrong id must be a ValueError with
the numbers, never an index error deep in an embedding, a segfault or a silent
read of another row.

Each check is one reduction over the integer inputs (a few microseconds); the
forward it guards takes milliseconds. `python -m bench throughput --validation`
measures the overhead.

While a graph is recorded (torch.jit.trace and the legacy torch.onnx.export,
torch.export and torch.onnx.export(dynamo=True), torch.compile) the checks that
read values (the id ranges) are skipped: a Python branch on a value is frozen
into a trace, and export and fullgraph compile cannot record it at all. Checks
on dtypes and the number of dims run everywhere; checks on sizes run in eager
mode and under export/compile, where they become guards on the symbolic shapes,
but not under torch.jit.trace, where sizes are traced tensors whose comparison
would be frozen (with a TracerWarning).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bertlite.config import BertConfig
from bertlite.utils.graph import recording_graph

# What an embedding lookup takes; uint8, int16 and bool ids fail deep inside torch.
ID_DTYPES = (torch.int64, torch.int32)


def check_ids(name: str, ids: Tensor, limit: int, limit_name: str) -> None:
    """ids must be int64/int32 values in [0, limit); the range is checked in eager mode only."""
    if ids.dtype not in ID_DTYPES:
        raise ValueError(f"{name} must be an integer tensor of ids, got dtype {ids.dtype} (use .long())")
    if recording_graph() or ids.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(ids))
    if low < 0:
        raise ValueError(f"{name} contains {low}; ids must be >= 0")
    if high >= limit:
        raise ValueError(f"{name} contains {high}, but {limit_name}={limit} (valid ids are 0..{limit - 1})")


def check_length(seq_length: int, config: BertConfig) -> None:
    limit = config.max_sequence_length  # max_position_embeddings, less the rows a RoBERTa family skips
    if seq_length > limit:
        table = "" if limit == config.max_position_embeddings else f" ({limit} tokens)"
        raise ValueError(
            f"sequence length {seq_length} exceeds max_position_embeddings={config.max_position_embeddings}{table}; "
            f"truncate the input to at most {limit} tokens (tokenizer: truncation=True, max_length={limit})"
        )


def embedding_width(config: BertConfig) -> tuple[str, int]:
    """The word embeddings' width and the field that sets it: hidden_size, or ELECTRA's embedding_size (its model
    projects them to hidden_size after).

    Args:
        config: the model's config.

    Returns:
        (the field's name, its value).
    """
    # A field of the family's config, not a key config.json carried (BertConfig reads those as attributes too).
    name = "embedding_size" if "embedding_size" in config.__dataclass_fields__ else "hidden_size"
    return name, getattr(config, name)


def check_inputs(
    config: BertConfig,
    input_ids: Tensor | None,
    inputs_embeds: Tensor | None,
    attention_mask: Tensor | None,
    token_type_ids: Tensor | None,
    position_ids: Tensor | None,
) -> None:
    """Validate BertModel.forward's inputs against the config; raise ValueError naming the input."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    sizes = not torch.jit.is_tracing()  # see the module docstring
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}")
        check_ids("input_ids", input_ids, config.vocab_size, "vocab_size")
        shape = tuple(input_ids.shape)
    else:
        name, width = embedding_width(config)
        if inputs_embeds.dim() != 3 or (sizes and inputs_embeds.shape[-1] != width):
            raise ValueError(
                f"inputs_embeds must have shape (batch, seq_len, {name}={width}), got {tuple(inputs_embeds.shape)}"
            )
        shape = tuple(inputs_embeds.shape[:2])
    if sizes and 0 in shape:
        given, tensor = ("input_ids", input_ids) if input_ids is not None else ("inputs_embeds", inputs_embeds)
        raise ValueError(
            f"{given} has shape {tuple(tensor.shape)}: the model needs at least one sequence of at least one token"
        )
    if position_ids is None:
        if sizes:
            check_length(shape[1], config)
    else:
        # (seq_len,) and (1, seq_len) broadcast over the batch, as transformers' position_ids buffer does.
        if sizes and tuple(position_ids.shape) not in ((shape[1],), (1, shape[1]), shape):
            raise ValueError(
                f"position_ids has shape {tuple(position_ids.shape)}, expected (batch, seq_len) = {shape}, "
                f"(1, {shape[1]}) or ({shape[1]},)"
            )
        check_ids("position_ids", position_ids, config.max_position_embeddings, "max_position_embeddings")
    if token_type_ids is not None:
        if sizes and tuple(token_type_ids.shape) != shape:
            raise ValueError(f"token_type_ids has shape {tuple(token_type_ids.shape)}, expected {shape}")
        check_ids("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")
    if sizes and attention_mask is not None and tuple(attention_mask.shape) != shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected (batch, seq_len) = {shape}")


def check_packed_inputs(config: BertConfig, input_ids: Tensor, lengths: Tensor, token_type_ids: Tensor | None) -> None:
    """The unpadded path's inputs: (total_tokens,) ids and per-sequence lengths."""
    if input_ids.dim() != 1:
        raise ValueError(f"packed input_ids must have shape (total_tokens,), got {tuple(input_ids.shape)}")
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor, got {lengths.dtype} of shape {tuple(lengths.shape)}")
    if lengths.numel() == 0 or int(lengths.min()) < 1:
        raise ValueError("every packed sequence needs at least one token")
    if int(lengths.sum()) != input_ids.numel():
        raise ValueError(f"lengths sum to {int(lengths.sum())}, but input_ids has {input_ids.numel()} tokens")
    check_length(int(lengths.max()), config)
    check_ids("input_ids", input_ids, config.vocab_size, "vocab_size")
    if token_type_ids is not None:
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids has shape {tuple(token_type_ids.shape)}, expected {tuple(input_ids.shape)}"
            )
        check_ids("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")


def check_first_token_of(first_token_of: Tensor, batch_size: int, output_attentions: bool) -> None:
    """first_token_of must be a 1-D tensor of sequence numbers of the packed batch, without output_attentions.

    Raises:
        ValueError: naming what is wrong.
    """
    if output_attentions:
        raise ValueError("first_token_of runs no full attention in the last layer: not with output_attentions")
    if first_token_of.dim() != 1:
        raise ValueError(f"first_token_of must be 1-D (sequence numbers), got shape {tuple(first_token_of.shape)}")
    check_ids("first_token_of", first_token_of, batch_size, "the batch's sequences")


# --- forward keywords ----------------------------------------------------------
# transformers' forward takes any keyword (into **kwargs) and ignores those it has no use for; bertlite
# ignores only the ones that cannot change a result and names any other, so a typo is not silently dropped.
# Keys of a tokenizer's output that are not model inputs (`model(**tokenizer(...))` passes them), and the
# Trainer's token count, which only a causal-LM loss uses (BertLMHeadModel reads it).
IGNORED_FORWARD_KWARGS = frozenset(
    {
        "special_tokens_mask",
        "length",
        "offset_mapping",
        "overflow_to_sample_mapping",
        "num_truncated_tokens",
        "num_items_in_batch",
    }
)
# Accepted as None (transformers v4 and v5 callers pass them so); any other value would change the result.
NONE_ONLY_FORWARD_KWARGS = {
    "head_mask": "head_mask was removed in transformers v5 and is not supported; zero a head's slice of "
    "attention.self.value.weight and .bias for the same effect",
    "cross_attn_head_mask": "head masks were removed in transformers v5 and are not supported",
    "encoder_hidden_states": "encoder_hidden_states (cross-attention) is not supported by bertlite",
    "encoder_attention_mask": "encoder_attention_mask (cross-attention) is not supported by bertlite",
    "past_key_values": "past_key_values (a KV cache) is not supported by bertlite",
    "cache": "cache (a KV cache) is not supported by bertlite",
    "is_causal": "is_causal is not supported by bertlite; set config.is_decoder instead",
}


def check_forward_kwargs(owner: str, kwargs: dict[str, Any]) -> None:
    """Raise for a keyword `owner`.forward() cannot honour; the rest are ignored, as transformers ignores them.

    Args:
        owner: the class name, for the message.
        kwargs: forward()'s extra keywords.

    Raises:
        NotImplementedError: a keyword accepted only as None (head_mask, past_key_values...) given a value.
        TypeError: a keyword transformers' forward would not ignore either.
    """
    for name, value in kwargs.items():
        if name in IGNORED_FORWARD_KWARGS:
            continue
        if name in NONE_ONLY_FORWARD_KWARGS:
            if value is not None:
                raise NotImplementedError(f"{owner}.forward(): {NONE_ONLY_FORWARD_KWARGS[name]} (pass None)")
            continue
        raise TypeError(f"{owner}.forward() got an unexpected keyword argument {name!r}")


def packed_position_ids(input_ids: Tensor, position_ids: Tensor, padding_idx: int) -> Tensor:
    """A packed batch's positions as transformers gives them from the ids: a padding_idx token in a text
    (a literal "<pad>") takes position padding_idx and is not counted.

    Args:
        input_ids: (N,) the packed ids.
        position_ids: (N,) padding_idx + 1 + each row's index in its sequence (BertModel's packed path).
        padding_idx: the pad id, whose position row no real token uses.

    Returns:
        (N,) positions.
    """
    pad = input_ids.eq(padding_idx).long()
    pads = torch.cumsum(pad, 0)  # pads up to each row, the row included
    starts = torch.arange(len(input_ids), device=input_ids.device) - (position_ids - padding_idx - 1)
    pads_in_sequence = pads - pads[starts] + pad[starts]  # from the row's sequence start to the row
    return torch.where(pad.bool(), padding_idx, position_ids - pads_in_sequence)
