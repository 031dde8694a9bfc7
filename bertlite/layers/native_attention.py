"""Packed attention on the CPU as one C++ op (attention.cpp), built once per process where a compiler is.

torch's SDPA runs one call per run of equal lengths, and its CPU kernel costs microseconds per
(sequence, head) before any arithmetic: at the 10-60 tokens most texts have, that overhead is most of
attention's time. `packed_attention` takes the packed rows as they are (each sequence found by the
layout's cu_seqlens, as flash attention's varlen form does) and runs every (sequence, head, block of
queries) in one parallel loop, split between the threads by cost, with the next item's rows prefetched.
Its softmax runs in float32 with the exponential torch's CPU flash attention uses. With a sliding window
(ModernBERT's local layers) each block of queries reads only the keys its window reaches.

It is checked against SDPA on a probe when built (a mismatch keeps SDPA) and in tests, and used unless
SDPA was timed faster on this CPU, once per machine (timing_choice). Built with torch's C++ extension
tools (bertlite.utils.native): about 10 s the first time on a machine, well under a second in later processes.
Every job builds it when it readies a model on the CPU (bertlite.jobs.prepare.ready), as does a caller of
build(); models made ready after that (layers.onednn.optimize) run it as their attention "varlen".
BERTLITE_NATIVE_ATTENTION=0 leaves it out.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from bertlite.layers.packing import PackedLayout
from bertlite.utils import native
from bertlite.utils.measured import Choice, Rounds, choose, machine_key, time_rounds

_SOURCE = Path(__file__).with_name("attention.cpp")
# "ops": torch.ops.bertlite_attention once built and checked (None if not), "reason": why not; "faster": the
# timing's verdict, with "timed" (its summary) or "slower" (why the op is not used)
_state: dict[str, object] = {}
_lock = threading.Lock()
_choices: dict[str, Choice] = {}
# The timed batch: 2,048 tokens in sequences of 32, BERT-base's 12 heads of 64.
TIMED_SEQUENCES, TIMED_LENGTH, TIMED_HEADS, TIMED_HEAD_SIZE = 64, 32, 12, 64


def enabled_by_environment() -> bool:
    """Whether the environment allows the op (BERTLITE_NATIVE_ATTENTION not "0")."""
    return os.environ.get("BERTLITE_NATIVE_ATTENTION", "1") != "0"


def build() -> bool:
    """Build, check and time the op once per process (later calls return at once); models made ready
    after it run it (layers.onednn.optimize installs "varlen" where built() is true).

    Returns:
        Whether it is used here; if not, reason() says why.
    """
    if not available():
        return False
    with _lock:
        if "faster" not in _state:
            choice = timing_choice(_state["ops"])
            _state["faster"] = choice.picked == "native"
            if _state["faster"]:
                _state["timed"] = choice.summary()
            else:
                _state["slower"] = f"timed slower than SDPA on this CPU ({choice.summary()})"
        return bool(_state["faster"])


def available() -> bool:
    """Build (or load) and check the op once per process, untimed: what an explicit "varlen" runs.

    Returns:
        Whether it runs here and agrees with SDPA; if not, reason() says why.
    """
    with _lock:
        if "ops" not in _state:
            _state["ops"], _state["reason"] = _load_checked()
        return _state["ops"] is not None


def built() -> bool:
    """Whether this process built, checked and timed the op, and uses it for models made ready now."""
    return bool(_state.get("faster"))


def reason() -> str | None:
    """Why the op is not used (None when it is, or before build())."""
    return _state.get("reason") or _state.get("slower")  # type: ignore[return-value]


def describe() -> str:
    """The attention models made ready now run on the CPU, in words (for a record)."""
    if built():
        return f"varlen: bertlite's C++ attention over the packed rows ({_state['timed']})"
    return f"auto: SDPA per run of equal lengths ({reason() or 'the C++ attention was not built in this process'})"


def _load_checked() -> tuple[object, str | None]:
    """torch.ops.bertlite_attention built, loaded and checked against SDPA, or None and why not."""
    if not enabled_by_environment():
        return None, "BERTLITE_NATIVE_ATTENTION=0"
    try:
        ops = _load()
    except Exception as error:  # no compiler, no ninja, no headers: keep SDPA
        return None, f"its C++ build failed here ({native.first_line(error)})"
    mismatch = _check(ops)
    return (None, mismatch) if mismatch else (ops, None)


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


def timing_choice(ops: object) -> Choice:
    """time_attention()'s verdict on this CPU: the op unless SDPA ran faster by FASTER_BY in every round;
    timed once per machine and kept with the other measured verdicts (bertlite.utils.measured)."""
    from bertlite.utils.capabilities import detect

    shape = f"{TIMED_SEQUENCES} x {TIMED_LENGTH} tokens, {TIMED_HEADS} heads of {TIMED_HEAD_SIZE}"
    key = machine_key(detect(), f"packed attention: C++ op vs SDPA per run, {shape}")
    if key not in _choices:
        _choices[key] = choose(key, "native", "sdpa", lambda: time_attention(ops))
    return _choices[key]


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
    ops = _state["ops"]
    return ops.packed_attention(qkv, layout.cu_seqlens, heads, scaling, -1 if window is None else window)  # type: ignore[union-attr]
