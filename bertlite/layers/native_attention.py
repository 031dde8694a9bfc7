"""Packed attention on the CPU as one C++ op (attention.cpp), built once per process where a compiler is.

torch's SDPA runs one call per run of equal lengths, and its CPU kernel costs microseconds per
(sequence, head) before any arithmetic: at the 10-60 tokens most texts have, that overhead is most of
attention's time. `packed_attention` takes the packed rows as they are (each sequence found by the
layout's cu_seqlens, as flash attention's varlen form does) and runs every (sequence, head, block of
queries) in one parallel loop, split between the threads by cost, with the next item's rows prefetched.
Its softmax runs in float32 with the exponential torch's CPU flash attention uses. With a sliding window
(ModernBERT's local layers) each block of queries reads only the keys its window reaches.

It is checked against SDPA on a probe when built (a mismatch keeps SDPA) and in tests, and used unless SDPA was
timed faster on this CPU, once per machine (OP, a bertlite.utils.native.NativeOp). Built with torch's C++ extension
tools (bertlite.utils.native): about 10 s the first time on a machine, well under a second in later processes.
A job in a fast mode (bf16, int8) builds it when it readies a model on the CPU (bertlite.jobs.prepare.ready), as
does a caller of build(); models made ready after that (layers.onednn.optimize) run it as their attention "varlen".
BERTLITE_NATIVE_ATTENTION=0 leaves it out.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from bertlite.layers.packing import PackedLayout
from bertlite.utils import native
from bertlite.utils.measured import Rounds, time_rounds

_SOURCE = Path(__file__).with_name("attention.cpp")
# The timed batch: 2,048 tokens in sequences of 32, BERT-base's 12 heads of 64.
TIMED_SEQUENCES, TIMED_LENGTH, TIMED_HEADS, TIMED_HEAD_SIZE = 64, 32, 12, 64
_TIMED = f"{TIMED_SEQUENCES} x {TIMED_LENGTH} tokens, {TIMED_HEADS} heads of {TIMED_HEAD_SIZE}"

# The op's life in this process (the lambdas read this module's functions when called, so tests can swap them).
OP = native.NativeOp(
    load=lambda: _load(),
    check=lambda ops: _check(ops),
    variables=("BERTLITE_NATIVE_ATTENTION",),
    timing=native.Timing(
        f"packed attention: C++ op vs SDPA per run, {_TIMED}",
        ("native", "sdpa"),
        "SDPA",
        lambda ops: time_attention(ops),
    ),
)


# The op's verbs under this module's names: build() (build, check and time once per process; models made ready
# after it run "varlen"), available() (built and checked, untimed: what an explicit "varlen" runs), built(), reason().
build, available, built, reason = OP.build, OP.available, OP.built, OP.reason


def describe() -> str:
    """The attention models made ready now run on the CPU, in words (for a record)."""
    if built():
        return f"varlen: bertlite's C++ attention over the packed rows ({OP.state['timed']})"
    return f"auto: SDPA per run of equal lengths ({reason() or 'the C++ attention was not built in this process'})"


def survey() -> dict[str, object]:
    """What a fast mode's attention runs here, for a report: the op built, checked and timed as readying does.

    Returns:
        {"native": whether the C++ attention is used, "summary": describe()}.
    """
    return {"native": build(), "summary": describe()}


def _load() -> object:
    """Build attention.cpp for this CPU (or find it in torch's extension cache) and load it."""
    native.load("bertlite_attention", _SOURCE)
    return torch.ops.bertlite_attention


def _check(ops: object) -> str | None:
    """Why the op's context differs from per-sequence SDPA's on a probe, or None where it agrees within
    float32 rounding: lengths across the vector widths' edges, head sizes on and off the vector width."""
    generator = torch.Generator().manual_seed(0)
    lengths = [1, 3, 16, 17, 40, 70, 129]
    cu_seqlens = torch.tensor([0, *lengths]).cumsum(0)
    for (heads, head_size), window in zip(((4, 32), (2, 20), (3, 64)), (None, 5, 40), strict=True):
        qkv = torch.randn(sum(lengths), 3 * heads * head_size, generator=generator) * 2
        expected = sdpa_runs(qkv, [(1, length) for length in lengths], heads, head_size**-0.5, window)
        got = ops.packed_attention(qkv, cu_seqlens, heads, head_size**-0.5, -1 if window is None else window)  # type: ignore[attr-defined]
        if not torch.allclose(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max())):
            return "its outputs differ from SDPA's on this machine"
    return None


def time_attention(ops: object) -> Rounds:
    """Time a length-sorted batch's attention as the op and as SDPA per run of equal lengths, interleaved.

    Args:
        ops: torch.ops.bertlite_attention.

    Returns:
        The Rounds of "native" and "sdpa" (bertlite.utils.measured.time_rounds).
    """
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(TIMED_SEQUENCES * TIMED_LENGTH, 3 * TIMED_HEADS * TIMED_HEAD_SIZE, generator=generator)
    cu_seqlens = torch.arange(TIMED_SEQUENCES + 1) * TIMED_LENGTH
    scaling = TIMED_HEAD_SIZE**-0.5
    with torch.inference_mode():
        return time_rounds(
            {
                "native": lambda: ops.packed_attention(qkv, cu_seqlens, TIMED_HEADS, scaling),  # type: ignore[attr-defined]
                "sdpa": lambda: sdpa_runs(qkv, [(TIMED_SEQUENCES, TIMED_LENGTH)], TIMED_HEADS, scaling),
            }
        )


def sdpa_runs(
    qkv: Tensor, runs: list[tuple[int, int]], heads: int, scaling: float, window: int | None = None
) -> Tensor:
    """torch's SDPA on packed rows, one call per run of equal-length sequences, as attention "auto" runs a
    length-sorted batch: the op's reference and its rival in the timing.

    Args:
        qkv: (N, 3H) float32 query|key|value rows.
        runs: (sequences, length) of each run, in row order.
        heads: attention heads.
        scaling: the factor on q.k.
        window: a sliding window (the keys at most this many positions away), as a boolean mask; None: none.

    Returns:
        (N, H) context.
    """
    hidden = qkv.shape[1] // 3
    out, start = qkv.new_empty(qkv.shape[0], hidden), 0
    for count, length in runs:
        rows = slice(start, start + count * length)
        q, k, v = qkv[rows].view(count, length, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
        positions = torch.arange(length)
        near = None if window is None else (positions[None, :] - positions[:, None]).abs() <= window
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=near, scale=scaling)  # (count, heads, length, hs)
        out[rows].view(count, length, heads, hidden // heads).copy_(context.transpose(1, 2))
        start += count * length
    return out


def packed_attention(
    qkv: Tensor, layout: PackedLayout, heads: int, scaling: float, window: int | None = None
) -> Tensor:
    """Each sequence's queries over its own keys, on the packed rows as they are (available() or build() first).

    Args:
        qkv: (N, 3H) float32 query|key|value rows, columns contiguous.
        layout: the batch's PackedLayout (its cu_seqlens find the sequences).
        heads: attention heads.
        scaling: the factor on q.k.
        window: a sliding window: each query sees only the keys at most this many positions away; None: all.

    Returns:
        (N, H) context.
    """
    ops = OP.state["ops"]
    return ops.packed_attention(qkv, layout.cu_seqlens, heads, scaling, -1 if window is None else window)  # type: ignore[union-attr]
