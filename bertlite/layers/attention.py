"""Attention implementations by name, for both layouts of a batch.

`attn_implementation` names one entry; BertSelfAttention looks it up in the registry
of the layout it is given:
- padded (B, nh, T, hs) query/key/value: PADDED_ATTENTION. "eager" keeps transformers'
  op order (bitwise equal in float32) and is the only one that yields probabilities;
- packed (N, 3H) fused query|key|value rows plus a PackedLayout: PACKED_ATTENTION.
  "eager" is its reference (the padded eager on a scattered grid); "sdpa" is one SDPA
  call on the padded grid; "per_sequence" one SDPA call per run of equal lengths, no grid;
  "half_bmm" two batched GEMMs on a head-major grid (bf16/fp16); "nested" torch's jagged
  tensors; "varlen" one call over the packed rows themselves: flash attention on CUDA (bf16/fp16:
  the GPU's packed default, which jobs.prepare installs where it runs), bertlite's C++ op on the CPU
  (layers.native_attention: layers.onednn.optimize installs it where it was built and timed faster);
  "auto" is one SDPA call per sequence on the CPU, in float32 (the default that layers.onednn.optimize
  installs otherwise), so a text's context does not depend on what shares its batch. On a padded batch "auto"
  and "varlen" are "sdpa".
A model with a relative position bias (MPNet) gives it to every implementation as `position_bias`, the
(1, nh, T, T) terms added to the scaled scores; packed, "nested" (a kernel without an additive bias) runs
"sdpa" instead, "varlen" "auto" on the CPU and "sdpa" elsewhere (PACKED_BIASED_ATTENTION).
Attention is the only step that looks at sequence boundaries.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from bertlite.errors import AttentionUnavailableError
from bertlite.layers import native_attention
from bertlite.layers.packing import PackedLayout
from bertlite.utils import graph

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # torch before 2.9
    varlen_attn = None

# --- padded ----------------------------------------------------------------------
# position_scores: unscaled (B, nh, T, T) terms added to q.k before scaling
# (relative position embeddings); empty for absolute positions. position_bias: (1, nh, T, T) terms
# added after scaling (MPNet's relative attention bias); None for the others.
AttentionFn = Callable[
    [Tensor, Tensor, Tensor, "Tensor | None", float, float, "tuple[Tensor, ...]", "Tensor | None"],
    tuple[Tensor, "Tensor | None"],
]


def eager_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    bias: Tensor | None,
    scaling: float,
    dropout_p: float,
    position_scores: tuple[Tensor, ...] = (),
    position_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention in transformers' op order (bitwise equal in float32): the padded reference.

    Args:
        query, key, value: (B, nh, T, hs).
        bias: additive (B, 1, 1, T) or (B, 1, T, T) mask, 0 / dtype-min; None: nothing masked.
        scaling: the factor on q.k (head_dim**-0.5).
        dropout_p: dropout on the probabilities (0 in eval).
        position_scores: unscaled (B, nh, T, T) relative-position terms added to q.k before scaling;
            empty for absolute positions.
        position_bias: (1, nh, T, T) or (B, nh, T, T) relative-position terms added after scaling
            (MPNet's); None for the others.

    Returns:
        ((B, T, nh, hs) context, (B, nh, T, T) probabilities).
    """
    scores = torch.matmul(query, key.transpose(2, 3))  # (B, nh, T, T)
    if position_scores or position_bias is not None:
        # Relative positions follow the op order of transformers 4.x's BERT and of its MPNet: terms added
        # one by one, then a division by sqrt(head_dim) (BERT's scaling is always head_dim**-0.5; 1 / scaling
        # would round differently), then MPNet's bias.
        for term in position_scores:
            scores = scores + term
        scores = scores / math.sqrt(query.shape[-1])
        if position_bias is not None:
            scores = scores + position_bias
    else:
        # Scale after the matmul, as transformers v5 does: the order decides the last bit.
        scores = scores * scaling
    if bias is not None:
        scores = scores + bias
    probs = F.softmax(scores, dim=-1)
    probs = F.dropout(probs, p=dropout_p, training=dropout_p > 0)
    context = torch.matmul(probs, value).transpose(1, 2).contiguous()  # (B, T, nh, hs)
    return context, probs


def sdpa_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    bias: Tensor | None,
    scaling: float,
    dropout_p: float,
    position_scores: tuple[Tensor, ...] = (),
    position_bias: Tensor | None = None,
) -> tuple[Tensor, None]:
    """Attention as one torch scaled_dot_product_attention call.

    Args:
        query, key, value, bias, scaling, dropout_p, position_scores, position_bias: as in eager_attention.

    Returns:
        ((B, T, nh, hs) context, None): SDPA yields no probabilities.
    """
    if position_scores:
        # SDPA scales only q.k, so the relative terms go in pre-scaled, as part of the additive mask.
        relative = sum(position_scores[1:], position_scores[0]) * scaling  # (B, nh, T, T)
        bias = relative if bias is None else relative + bias
    bias = _with_position_bias(bias, position_bias)
    context = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, dropout_p=dropout_p, scale=scaling)
    return context.transpose(1, 2).contiguous(), None  # (B, T, nh, hs)


def _with_position_bias(bias: Tensor | None, position_bias: Tensor | None) -> Tensor | None:
    """One additive mask of a padding bias ((B, 1, 1, T) or None) and a position bias ((1, nh, T, T) or None)."""
    if position_bias is None:
        return bias
    return position_bias if bias is None else position_bias + bias  # (B, nh, T, T)


# "auto" and "varlen" on a padded batch: SDPA, the fastest padded implementation everywhere.
PADDED_ATTENTION: dict[str, AttentionFn] = {
    "eager": eager_attention,
    "sdpa": sdpa_attention,
    "auto": sdpa_attention,
    "varlen": sdpa_attention,
}

# --- packed ----------------------------------------------------------------------
# qkv: (N, 3H), each row query|key|value of one real token; returns the (N, H) context
# and, for eager, the (B, nh, T, T) probabilities on the padded grid. PACKED_BIASED_ATTENTION's also take
# position_bias: (1, nh, T, T) terms added to the scaled scores on the grid of T = layout.max_length; each
# sequence starts at position 0, so one grid's bias serves every sequence (a sequence of length L reads
# its [:L, :L] corner).
PackedAttentionFn = Callable[[Tensor, PackedLayout, int, float, float], tuple[Tensor, "Tensor | None"]]


def _grid_qkv(qkv: Tensor, layout: PackedLayout, heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """3 x (B, nh, T, hs) views of the packed rows scattered to the padded grid (zeros in the padding)."""
    batch, width, hidden = layout.batch_size, layout.max_length, qkv.shape[1] // 3
    grid = qkv if layout.attention_bias is None else layout.scatter_to_grid(qkv)  # no padding: already the grid
    q, k, v = grid.view(batch, width, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
    return q, k, v


def _gather_context(context: Tensor, layout: PackedLayout) -> Tensor:
    """(B, T, nh, hs) context on the grid (any strides) -> (N, H) rows of the real tokens."""
    rows = context if layout.attention_bias is None else layout.gather_from_grid(context)
    return rows.reshape(-1, context.shape[-2] * context.shape[-1])


def packed_eager_attention(
    qkv: Tensor,
    layout: PackedLayout,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The padded eager reference on the grid the packed rows make: for tests, and probabilities.

    Args:
        qkv: (N, 3H), each row query|key|value of one real token.
        layout: the batch's PackedLayout.
        heads: the number of attention heads nh.
        scaling: the factor on q.k (head_dim**-0.5).
        dropout_p: dropout on the probabilities (0 in eval).
        position_bias: (1, nh, T, T) relative-position terms added to the scaled scores (MPNet's), T the
            layout's max_length; None: none.

    Returns:
        ((N, H) context, (B, nh, T, T) probabilities on the padded grid).
    """
    q, k, v = _grid_qkv(qkv, layout, heads)
    bias = None if layout.attention_bias is None else layout.attention_bias.to(qkv.dtype)
    context, probs = eager_attention(q, k, v, bias, scaling, dropout_p, position_bias=position_bias)
    return _gather_context(context, layout), probs


def packed_sdpa_attention(
    qkv: Tensor,
    layout: PackedLayout,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
) -> tuple[Tensor, None]:
    """One SDPA call on the padded grid, the result gathered back.

    The padding exists only here, for the cheap part of the layer.

    Args:
        qkv, layout, heads, scaling, dropout_p, position_bias: as in packed_eager_attention.

    Returns:
        ((N, H) context, None).
    """
    q, k, v = _grid_qkv(qkv, layout, heads)
    bias = None if layout.attention_bias is None else layout.attention_bias.to(qkv.dtype)
    bias = _with_position_bias(bias, position_bias)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scaling)
    return _gather_context(context.transpose(1, 2), layout), None


def packed_first_token_attention(
    qkv: Tensor,
    layout: PackedLayout,
    sequences: Tensor,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
) -> Tensor:
    """The attention of only some sequences' first token ([CLS]), each over its own sequence's keys.

    The last layer of a model whose head reads only [CLS] needs no other query. On the CPU: one SDPA call
    per sequence asked for, its one query on its own keys and values (no padded grid, whose width would
    change the sum), so a sequence's bits do not depend on its batch. Elsewhere (a GPU, where a call per
    sequence would cost a launch each): one call with one query per sequence on the keys and values
    scattered to the padded grid.

    Args:
        qkv: (N, 3H), each row query|key|value of one real token.
        layout: the batch's PackedLayout.
        sequences: (R,) the sequences whose first token to run (repeats allowed).
        heads, scaling, dropout_p, position_bias: as in packed_eager_attention (the first query's row of it
            is read).

    Returns:
        (R, H) context.
    """
    hidden = qkv.shape[1] // 3
    head_dim = hidden // heads
    if qkv.device.type != "cpu":
        return _first_token_on_grid(qkv, layout, heads, scaling, dropout_p, position_bias)[sequences]
    out = qkv.new_empty(layout.batch_size, hidden)
    starts, lengths = layout.starts.tolist(), layout.lengths.tolist()
    for i in sorted(set(sequences.tolist())):  # each sequence by itself: its bits whatever shares its batch
        rows = qkv[starts[i] : starts[i] + lengths[i]]
        query = rows[:1, :hidden].view(1, 1, heads, head_dim).transpose(1, 2)  # (1, nh, 1, hs)
        key, value = rows[:, hidden:].view(1, -1, 2, heads, head_dim).permute(2, 0, 3, 1, 4)  # (1, nh, L, hs)
        bias = None if position_bias is None else position_bias[:, :, :1, : lengths[i]]  # (1, nh, 1, L)
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, dropout_p=dropout_p, scale=scaling)
        out[i] = context.reshape(hidden)
    return out[sequences]  # (R, H)


def _first_token_on_grid(
    qkv: Tensor, layout: PackedLayout, heads: int, scaling: float, dropout_p: float, position_bias: Tensor | None
) -> Tensor:
    """Every sequence's first-token context, (B, H), from one SDPA call on the padded grid."""
    hidden = qkv.shape[1] // 3
    batch, width, head_dim = layout.batch_size, layout.max_length, hidden // heads
    kv = qkv[:, hidden:]
    grid = kv if layout.attention_bias is None else layout.scatter_to_grid(kv)  # no padding: already the grid
    key, value = grid.view(batch, width, 2, heads, head_dim).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
    query = qkv[layout.starts, :hidden].view(batch, heads, 1, head_dim)  # (B, nh, 1, hs)
    bias = None if layout.attention_bias is None else layout.attention_bias.to(qkv.dtype)
    bias = _with_position_bias(bias, None if position_bias is None else position_bias[:, :, :1])  # (B, nh, 1, T)
    context = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, dropout_p=dropout_p, scale=scaling)
    return context.reshape(batch, hidden)  # (B, nh, 1, hs) -> (B, H)


# Queries per SDPA call of packed_windowed_attention: each call's scores are (sequences, nh, chunk, chunk + 2w),
# so memory grows with the tokens, not with the square of the longest text.
WINDOW_CHUNK = 256


def window_bias(queries: range, keys: range, window: int, like: Tensor) -> Tensor:
    """A sliding window as an additive bias: 0 where |query - key| <= window, the dtype's min elsewhere.

    Args:
        queries, keys: the positions of the queries and of the keys.
        window: the tokens a query sees on each side.
        like: a tensor whose dtype and device the bias takes.

    Returns:
        (len(queries), len(keys)).
    """
    q = torch.arange(queries.start, queries.stop, device=like.device)[:, None]
    k = torch.arange(keys.start, keys.stop, device=like.device)[None, :]
    far = (q - k).abs() > window
    return torch.zeros(far.shape, dtype=like.dtype, device=like.device).masked_fill_(far, torch.finfo(like.dtype).min)


def run_views(
    qkv: Tensor, out: Tensor, layout: PackedLayout, heads: int, one_by_one: bool = False
) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor, int]]:
    """Each run of equal-length sequences (layout.runs), whose packed rows already are a (sequences, length) grid.

    Args:
        qkv: (N, 3H) packed query|key|value.
        out: (N, H), where the context goes.
        layout: the batch's layout.
        heads: attention heads.
        one_by_one: each sequence as a run of its own.

    Yields:
        Per run: query, key and value as (n, heads, L, head_size) views of qkv, the run's (n, L, heads,
        head_size) view of out, and L.
    """
    hidden = out.shape[1]
    head_size = hidden // heads
    runs = layout.runs
    if one_by_one:
        runs = [(start + i * length, 1, length) for start, count, length in runs for i in range(count)]
    for start, count, length in runs:
        rows = slice(start, start + count * length)
        q, k, v = qkv[rows].view(count, length, 3, heads, head_size).permute(2, 0, 3, 1, 4)
        yield q, k, v, out[rows].view(count, length, heads, head_size), length


def packed_windowed_attention(
    qkv: Tensor, layout: PackedLayout, heads: int, scaling: float, dropout_p: float, window: int
) -> tuple[Tensor, None]:
    """Sliding-window attention on each sequence's own rows: a query sees the keys at most `window` positions
    away, in its own sequence only, as an additive window bias on the padded grid would give it.

    One SDPA call per run of equal-length sequences and per WINDOW_CHUNK queries, on only the keys those
    queries can see, so neither padding nor a (T, T) grid is made: an 8,192-token text takes memory linear
    in its tokens. On the CPU, bf16/fp16 run in float32 (as packed_auto_attention's per-sequence calls).

    Args:
        qkv, layout, heads, scaling, dropout_p: as in packed_eager_attention.
        window: the tokens a query sees on each side.

    Returns:
        ((N, H) context, None).
    """
    dtype = qkv.dtype
    if qkv.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
        qkv = qkv.float()
    out = qkv.new_empty(qkv.shape[0], qkv.shape[1] // 3)
    for q, k, v, context, length in run_views(qkv, out, layout, heads):
        for first in range(0, length, WINDOW_CHUNK):
            last = min(first + WINDOW_CHUNK, length)
            low, high = max(0, first - window), min(length, last + window)
            bias = window_bias(range(first, last), range(low, high), window, qkv)
            chunk = F.scaled_dot_product_attention(
                q[:, :, first:last],
                k[:, :, low:high],
                v[:, :, low:high],
                attn_mask=bias,
                dropout_p=dropout_p,
                scale=scaling,
            )
            context[:, first:last].copy_(chunk.transpose(1, 2))
    return out.to(dtype), None


def packed_auto_attention(
    qkv: Tensor,
    layout: PackedLayout,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
) -> tuple[Tensor, None]:
    """On the CPU, one SDPA call per sequence on its own rows, in float32 (bf16/fp16 too: as fast, more accurate).

    A sequence's context is then the same bits whatever else shares its batch: no padded grid, whose width
    (the batch's longest text) would change the order SDPA sums a row in, and no batch of sequences, whose
    size changes how torch's CPU kernel splits its work. Elsewhere: sdpa.

    Args:
        qkv, layout, heads, scaling, dropout_p, position_bias: as in packed_eager_attention.

    Returns:
        ((N, H) context, None).
    """
    dtype = qkv.dtype
    if qkv.device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return packed_sdpa_attention(qkv, layout, heads, scaling, dropout_p, position_bias)
    as_float = None if position_bias is None else position_bias.float()
    context, _ = packed_per_sequence_attention(qkv.float(), layout, heads, scaling, dropout_p, as_float, True)
    return context.to(dtype), None


def packed_half_bmm_attention(
    qkv: Tensor,
    layout: PackedLayout,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
) -> tuple[Tensor, None]:
    """Attention as two batched GEMMs over (B * nh) contiguous matrices, the softmax accumulated in float32.

    For bf16/fp16 batches, inference only.

    Args:
        qkv, layout, heads, scaling, dropout_p, position_bias: as in packed_eager_attention.

    Returns:
        ((N, H) context, None).

    Raises:
        ValueError: dropout_p is not 0.
    """
    if dropout_p:
        raise ValueError("attn_implementation='half_bmm' runs inference only (no attention dropout)")
    n, three_h = qkv.shape
    hidden, batch, width = three_h // 3, layout.batch_size, layout.max_length
    head_size = hidden // heads
    sequence, position = layout.sequence_index, layout.positions
    # Scatter straight into head-major order, so q, k and v need no copy to be contiguous.
    grid = qkv.new_zeros(3, batch, heads, width, head_size)
    grid.permute(1, 3, 0, 2, 4)[sequence, position] = qkv.view(n, 3, heads, head_size)
    q, k, v = (part.view(batch * heads, width, head_size) for part in grid)  # 3 x (B * nh, T, hs)
    bias = _with_position_bias(layout.attention_bias, position_bias)
    if bias is None:
        scores = torch.bmm(q, k.transpose(1, 2)).mul_(scaling)
    else:
        bias = bias.to(qkv.dtype).expand(batch, heads, width, width).reshape(batch * heads, width, width)
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scaling)  # (B * nh, T, T)
    probs = _softmax_half(scores)
    context = torch.bmm(probs, v).view(batch, heads, width, head_size)
    return context.permute(0, 2, 1, 3)[sequence, position].reshape(n, hidden), None  # (N, H)


def _softmax_half(scores: Tensor) -> Tensor:
    """Softmax over the last dim of bf16/fp16 scores, accumulated in float32 either way.

    torch's CPU kernels differ by row length (micro-benchmark, 24k rows): the half
    kernel is up to 5x slower when a row leaves a long tail past its 32-wide vectors
    (30 tokens: 2.5 ms vs 0.47 ms at 32), the float32 kernel is slow below 16. Both
    routes compute in float32 and round once; they differ by one bf16 ulp on about
    1e-5 of the elements.
    """
    width = scores.shape[-1]
    if width >= 16 and width % 32 > 4:
        return torch.softmax(scores.float(), dim=-1).to(scores.dtype)
    return torch.softmax(scores, dim=-1)


def packed_per_sequence_attention(
    qkv: Tensor,
    layout: PackedLayout,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
    one_by_one: bool = False,
) -> tuple[Tensor, None]:
    """SDPA on each sequence's own rows, no padding anywhere.

    One call per run of equal-length sequences (layout.runs), whose rows already are a (sequences,
    length) grid, so a length-sorted batch costs a few calls and no scatter into a padded grid.

    Args:
        qkv, layout, heads, scaling, dropout_p, position_bias: as in packed_eager_attention (a run of length
            L reads its [:L, :L] corner).
        one_by_one: one call per sequence: the call a sequence alone gets, so its bits do not depend on how
            many others of its length share the batch (torch's CPU kernel splits its work by the batch's size).

    Returns:
        ((N, H) context, None).
    """
    out = qkv.new_empty(qkv.shape[0], qkv.shape[1] // 3)
    for q, k, v, context, length in run_views(qkv, out, layout, heads, one_by_one):
        bias = None if position_bias is None else position_bias[:, :, :length, :length]  # (1, nh, L, L)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scaling)
        context.copy_(attended.transpose(1, 2))
    return out, None


def packed_nested_attention(
    qkv: Tensor, layout: PackedLayout, heads: int, scaling: float, dropout_p: float
) -> tuple[Tensor, None]:
    """SDPA over variable lengths on torch.nested jagged tensors, without a Python loop.

    Args:
        qkv, layout, heads, scaling, dropout_p: as in packed_eager_attention.

    Returns:
        ((N, H) context, None).
    """
    hidden = qkv.shape[1] // 3
    offsets = torch.cat([layout.starts, layout.starts[-1:] + layout.lengths[-1:]])
    parts = []
    for i in range(3):
        values = qkv[:, i * hidden : (i + 1) * hidden].reshape(-1, heads, hidden // heads).contiguous()
        nested = torch.nested.nested_tensor_from_jagged(values, offsets)  # (B, j, nh, hs)
        parts.append(nested.transpose(1, 2))  # (B, nh, j, hs)
    with warnings.catch_warnings():  # torch's own "nested tensors are a prototype" notice, every call
        warnings.simplefilter("ignore", UserWarning)
        context = F.scaled_dot_product_attention(*parts, dropout_p=dropout_p, scale=scaling)
    return context.transpose(1, 2).values().reshape(-1, hidden), None


def packed_varlen_attention(
    qkv: Tensor, layout: PackedLayout, heads: int, scaling: float, dropout_p: float, window: int | None = None
) -> tuple[Tensor, None]:
    """Attention on the packed rows as they are, each sequence found by layout.cu_seqlens: one call, no grid,
    no padding. On CUDA (bf16/fp16) torch's flash attention (torch.nn.attention.varlen, the kernel
    flash-attention's unpadded BERT runs); on the CPU bertlite's C++ op (bertlite.layers.native_attention,
    built on the first call where no caller built it), bf16/fp16 in float32 as "auto" runs them.

    Inference only: on the CPU, a forward that records gradients, drops probabilities out or is recorded
    into a graph (torch.compile, torch.export) runs "auto" (the same numbers within float32 rounding).
    jobs.prepare.packed_attention_for checks that the CUDA kernel runs on the model's device and dtype
    before installing it; layers.onednn.optimize installs the CPU op where it was built and timed faster
    than SDPA here.

    With a sliding window (ModernBERT's local layers), the C++ op takes it itself: each block of queries over
    only the keys its window reaches; off the CPU, packed_windowed_attention runs it.

    Args:
        qkv, layout, heads, scaling, dropout_p: as in packed_eager_attention.
        window: the tokens a query sees on each side (as in packed_windowed_attention); None: every key.

    Returns:
        ((N, H) context, None).

    Raises:
        ValueError: on CUDA, dropout_p is not 0, or qkv is not float16/bfloat16; another device.
        AttentionUnavailableError: this torch has no varlen_attn (CUDA), or the C++ op does not build or
            check out here (CPU).
    """
    if qkv.device.type == "cpu":
        return _cpu_varlen_attention(qkv, layout, heads, scaling, dropout_p, window)
    if window is not None:  # torch's varlen kernel takes no window
        return packed_windowed_attention(qkv, layout, heads, scaling, dropout_p, window)
    if dropout_p:
        raise ValueError("attn_implementation='varlen' runs inference only (no attention dropout)")
    if qkv.device.type != "cuda" or qkv.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"attn_implementation='varlen' runs on the CPU, or on CUDA in float16 or bfloat16, got "
            f"{qkv.device.type} {qkv.dtype}; use 'sdpa' or 'auto'"
        )
    if varlen_attn is None:
        raise AttentionUnavailableError(
            f"attn_implementation='varlen' needs torch >= 2.9 (torch.nn.attention.varlen); this is {torch.__version__}"
        )
    n, three_h = qkv.shape
    head_size = three_h // 3 // heads
    query, key, value = qkv.view(n, 3, heads, head_size).unbind(1)  # 3 x (N, nh, hs)
    # BERT's scaling is head_size**-0.5, the kernel's default; scale= is passed only otherwise (older torch lacks it).
    scale = {} if scaling == head_size**-0.5 else {"scale": scaling}
    cu_seqlens, width = layout.cu_seqlens, layout.max_length
    context = varlen_attn(query, key, value, cu_seqlens, cu_seqlens, width, width, **scale)  # (N, nh, hs)
    return context.reshape(n, heads * head_size), None


def _cpu_varlen_attention(
    qkv: Tensor, layout: PackedLayout, heads: int, scaling: float, dropout_p: float, window: int | None = None
) -> tuple[Tensor, None]:
    """packed_varlen_attention on the CPU (with a sliding window when given): bertlite's C++ op, or SDPA
    ("auto", or packed_windowed_attention) where it cannot run this forward."""
    # The op has no backward and no graph form (torch.compile, torch.export, tracing): those run SDPA.
    if dropout_p or (torch.is_grad_enabled() and qkv.requires_grad) or graph.recording_graph():
        if window is not None:
            return packed_windowed_attention(qkv, layout, heads, scaling, dropout_p, window)
        return packed_auto_attention(qkv, layout, heads, scaling, dropout_p)
    if not native_attention.available():
        raise AttentionUnavailableError(
            f"attn_implementation='varlen' on the CPU runs bertlite's C++ attention, which is not available "
            f"here: {native_attention.reason()}; use 'auto'"
        )
    context = native_attention.packed_attention(qkv.float(), layout, heads, scaling, window)
    return context.to(qkv.dtype), None


def packed_biased_varlen_attention(
    qkv: Tensor,
    layout: PackedLayout,
    heads: int,
    scaling: float,
    dropout_p: float,
    position_bias: Tensor | None = None,
) -> tuple[Tensor, None]:
    """ "varlen" for a model with a position bias, which neither varlen kernel adds: "auto" on the CPU (SDPA
    per run), "sdpa" on the padded grid elsewhere.

    Args:
        qkv, layout, heads, scaling, dropout_p, position_bias: as in packed_eager_attention.

    Returns:
        ((N, H) context, None).
    """
    fallback = packed_auto_attention if qkv.device.type == "cpu" else packed_sdpa_attention
    return fallback(qkv, layout, heads, scaling, dropout_p, position_bias)


PACKED_ATTENTION: dict[str, PackedAttentionFn] = {
    "eager": packed_eager_attention,
    "sdpa": packed_sdpa_attention,
    "per_sequence": packed_per_sequence_attention,
    "half_bmm": packed_half_bmm_attention,
    "nested": packed_nested_attention,
    "varlen": packed_varlen_attention,
    "auto": packed_auto_attention,
}
# The packed implementations that take a position_bias; those whose kernel adds no bias run "sdpa" on the grid.
PACKED_BIASED_ATTENTION: dict[str, Callable[..., tuple[Tensor, Tensor | None]]] = {
    "eager": packed_eager_attention,
    "sdpa": packed_sdpa_attention,
    "per_sequence": packed_per_sequence_attention,
    "half_bmm": packed_half_bmm_attention,
    "nested": packed_sdpa_attention,
    "varlen": packed_biased_varlen_attention,
    "auto": packed_auto_attention,
}
DEFAULT_ATTENTION = "sdpa"
ATTENTION_IMPLEMENTATIONS = sorted(set(PADDED_ATTENTION) | set(PACKED_ATTENTION))
# transformers' names for the flash-attn package's kernels: there they raise ImportError when the package (or a
# GPU it runs on) is missing, and user code catches that to fall back to sdpa.
FLASH_ATTENTION_NAMES = ("flash_attention_2", "flash_attention_3", "flash_attention_4")


def check_attn_implementation(name: str) -> str:
    """Check an attention name.

    Args:
        name: one of ATTENTION_IMPLEMENTATIONS.

    Returns:
        `name`.

    Raises:
        AttentionUnavailableError: one of transformers' flash-attn names (an ImportError, as there, and a
            ValueError).
        ValueError: an unknown name.
    """
    if name in FLASH_ATTENTION_NAMES:
        raise AttentionUnavailableError(
            f"attn_implementation={name!r} is not available: bertlite does not use the flash-attn package; "
            "use 'sdpa' (on a GPU torch runs FlashAttention kernels through it) or 'eager'"
        )
    if name not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation={name!r} is not one of {ATTENTION_IMPLEMENTATIONS}")
    return name


def padded_attention(name: str) -> AttentionFn:
    """Look up the padded implementation of `name`.

    Args:
        name: a key of PADDED_ATTENTION.

    Returns:
        The attention function (eager_attention's signature).

    Raises:
        ValueError: a packed-only name (the message names the layout it needs).
    """
    if name not in PADDED_ATTENTION:
        raise ValueError(
            f"attn_implementation={name!r} runs packed batches only (input_ids (N,) with lengths= or layout=); "
            f"for padded (batch, seq_len) inputs use one of {sorted(PADDED_ATTENTION)}"
        )
    return PADDED_ATTENTION[name]
