"""dtype="auto" on a CPU by measurement: float32, or bfloat16 where it is measured faster here.

Which CPUs run bf16 fast is not a rule of flags: a CPU's bf16 dot products, its AMX tiles and the
kernels torch ships decide it together. So where bf16 is native (Capabilities.bf16_native), the first
"auto" times a pass of a BERT layer's Linears (fused query|key|value, attention output, intermediate,
output) at the model's sizes in float32 and in bfloat16, on oneDNN's linear as the model runs it, in
interleaved rounds, and picks bfloat16 only when it is at least measured.FASTER_BY faster in every round
(bertlite.utils.measured has the rule). A verdict whose rounds agree is kept per CPU, ISA caps, torch
version, thread count and sizes, in the process and in the user cache folder, so later processes do
not time again; rounds that disagree (or too few, on a busy machine) give float32 and are not kept. float16
is never picked: its range (65,504) overflows on real checkpoints' activations, and a NaN vector would be a
silently wrong number.

BERTLITE_AUTO_DTYPE=float32|bfloat16 forces the verdict.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bertlite.utils.measured import Choice, Rounds, cache_path, choose, machine_key, time_rounds

if TYPE_CHECKING:
    import torch

    from bertlite.utils.capabilities import Capabilities

FORCE_VARIABLE = "BERTLITE_AUTO_DTYPE"
TOKENS = 256  # rows of the timed batch: a packed batch of short texts, and a few tens of ms per pass
DEFAULT_SIZES = (768, 3072)  # hidden and intermediate sizes of BERT-base, when no model is named
CANDIDATES = ("float32", "bfloat16")

_verdicts: dict[str, Verdict] = {}


@dataclass(frozen=True)
class Verdict:
    """What dtype="auto" picks on this CPU, and why."""

    dtype: str  # "float32" or "bfloat16"
    reason: str  # one line for `bertlite env`, with the spread of the rounds
    seconds: dict[str, float] = field(default_factory=dict)  # median seconds per pass per dtype; empty when not timed
    spread: dict[str, float] = field(default_factory=dict)  # rounds counted and dropped; bf16's min/median/max x
    kept: bool = False  # the rounds agreed, so later processes use this verdict without timing

    def ratios(self) -> dict[str, float]:
        """How many times faster than float32 each timed dtype ran, the median over the rounds (empty when
        nothing was timed)."""
        if "median" not in self.spread:
            return {}
        return {"float32": 1.0, "bfloat16": self.spread["median"]}


def auto_dtype(caps: Capabilities, sizes: tuple[int, int] | None = None) -> Verdict:
    """The dtype "auto" runs a model in on this CPU.

    Args:
        caps: this CPU's capabilities (bertlite.utils.capabilities.detect()).
        sizes: the model's (hidden_size, intermediate_size); None: BERT-base's.

    Returns:
        The Verdict: forced by BERTLITE_AUTO_DTYPE, float32 where bf16 is not native (nothing is
        timed), else from a timing of this CPU, cached.

    Raises:
        ValueError: BERTLITE_AUTO_DTYPE is set to something other than float32 or bfloat16.
    """
    forced = os.environ.get(FORCE_VARIABLE, "").strip()
    if forced:
        if forced not in CANDIDATES:
            raise ValueError(f"{FORCE_VARIABLE}={forced!r}: choose one of {', '.join(CANDIDATES)}")
        return Verdict(forced, f"forced by {FORCE_VARIABLE}")
    if not caps.bf16_native:
        return Verdict("float32", "bfloat16 is not native on this CPU, so it is not timed")
    hidden, intermediate = sizes or DEFAULT_SIZES
    key = machine_key(caps, f"dtype auto: hidden {hidden} intermediate {intermediate}")
    if key not in _verdicts:
        _verdicts[key] = _verdict(choose(key, *CANDIDATES, lambda: measure(_shapes(hidden, intermediate))))
    return _verdicts[key]


def measure(shapes: Sequence[tuple[int, int]], dtypes: Sequence[str] = CANDIDATES) -> Rounds:
    """Time a pass of Linears of these shapes per dtype in interleaved rounds (bertlite.utils.measured.time_rounds).

    Args:
        shapes: (out_features, in_features) of each Linear.
        dtypes: dtype names; the first is the baseline.

    Returns:
        The Rounds: dtype name -> seconds per pass in each round that counted.
    """
    return time_rounds({name: linear_pass(name, shapes) for name in dtypes})


def _shapes(hidden: int, intermediate: int) -> list[tuple[int, int]]:
    return [(3 * hidden, hidden), (hidden, hidden), (intermediate, hidden), (hidden, intermediate)]


def _verdict(choice: Choice) -> Verdict:
    how = f"timed earlier on this CPU (cached in {cache_path()})" if choice.cached else "timed on this CPU"
    return Verdict(choice.picked, f"{how}: {choice.summary()}", choice.seconds(), choice.spread(), choice.decided)


def linear_pass(name: str, shapes: Sequence[tuple[int, int]], tokens: int = TOKENS) -> Any:
    """A function that runs x @ W.T for each shape, in dtype `name`, on the kernel the model uses.

    Args:
        name: a torch dtype's name ("float32", "bfloat16").
        shapes: (out_features, in_features) of each Linear.
        tokens: the rows of x.

    Returns:
        A function of no arguments that runs the Linears once.
    """
    import torch

    dtype: torch.dtype = getattr(torch, name)
    generator = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(tokens, n, generator=generator).to(dtype) for n in {i for _, i in shapes}}
    weights = [(0.05 * torch.randn(o, i, generator=generator)).to(dtype) for o, i in shapes]
    linear = _onednn_linear(dtype, weights, tokens)
    if linear is None:
        import torch.nn.functional as F

        return lambda: [F.linear(inputs[w.shape[1]], w) for w in weights]
    return lambda: [linear(inputs[i], w) for (_, i), w in zip(shapes, weights, strict=True)]


def _onednn_linear(dtype: torch.dtype, weights: list[torch.Tensor], tokens: int) -> Any:
    """oneDNN's linear (bertlite.layers.onednn's kernel, which utils, below layers, cannot import), float32
    weights in its packed layout as the model keeps them; None where this torch cannot run it."""
    import torch

    try:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, tokens) for w in weights] if dtype == torch.float32 else []
        x = torch.ones(2, weights[0].shape[1], dtype=dtype)
        torch.ops.mkldnn._linear_pointwise(x, (packed or weights)[0], None, "none", [], "")
    except (AttributeError, RuntimeError):
        return None
    weights[:] = packed or weights
    return lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
