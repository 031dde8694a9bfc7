"""Pooling token rows into one vector per text: packed rows (the jobs' default path) or a padded batch.

Every mode accumulates in float32 over each sequence's own rows, so padding cannot count.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bertlite.jobs.st.folders import POOLING_MODES
from bertlite.layers.packing import PackedLayout

__all__ = ["FIRST_TOKEN_POOLING", "POOLER_NEEDED", "pool", "pool_packed"]


FIRST_TOKEN_POOLING = {"cls", "pooler"}  # the pooling modes that read only the [CLS] row
POOLER_NEEDED = "pooling='pooler' needs a model with a pooler (add_pooling_layer=True)"


def pool_packed(hidden: Tensor, layout: PackedLayout, mode: str, pooler_output: Tensor | None = None) -> Tensor:
    """Pool packed token rows into one vector per sequence.

    Segment sums over each sequence's own rows, so padding cannot count. Accumulates in float32.

    Args:
        hidden: the model's packed last hidden state, (total_tokens, H).
        layout: the PackedLayout the rows were packed with.
        mode: one of POOLING_MODES ("cls", "pooler", "max", "mean", "mean_sqrt_len").
        pooler_output: the model's (B, H) BertPooler output, for mode 'pooler'; None otherwise.

    Returns:
        (B, H) float32 vectors, one per sequence.

    Raises:
        ValueError: `mode` is unknown, or 'pooler' without a pooler_output.
    """
    if mode == "cls":
        return hidden[layout.starts].float()
    if mode == "pooler":
        if pooler_output is None:
            raise ValueError(POOLER_NEEDED)
        return pooler_output.float()
    hidden = hidden.float()
    batch = (layout.batch_size, hidden.shape[1])
    rows = layout.sequence_index
    if mode == "max":
        index = rows[:, None].expand_as(hidden)
        return hidden.new_empty(batch).scatter_reduce_(0, index, hidden, "amax", include_self=False)
    summed = hidden.new_zeros(batch).index_add_(0, rows, hidden)
    counts = layout.lengths[:, None].to(hidden.dtype)
    if mode == "mean":
        return summed / counts
    if mode == "mean_sqrt_len":
        return summed / counts.sqrt()
    raise ValueError(f"pooling={mode!r} is not one of {', '.join(POOLING_MODES)}")


def pool(last_hidden_state: Tensor, attention_mask: Tensor, mode: str, pooler_output: Tensor | None = None) -> Tensor:
    """pool_packed() for a right-padded batch: its real tokens packed first.

    Args:
        last_hidden_state: (B, T, H) hidden states.
        attention_mask: (B, T), 1 for real tokens; every row needs at least one.
        mode: one of POOLING_MODES.
        pooler_output: the model's (B, H) BertPooler output, for mode 'pooler'; None otherwise.

    Returns:
        (B, H) float32 vectors, one per sequence.
    """
    mask = attention_mask.to(device=last_hidden_state.device, dtype=torch.bool)
    if not bool(mask.any(dim=1).all()):
        raise ValueError("attention_mask has a row without any token; every sequence needs at least one")
    return pool_packed(last_hidden_state[mask], PackedLayout.from_mask(mask.long()), mode, pooler_output)
