"""dtype="auto" on a CPU by measurement: float32, or bfloat16 where it is measured faster here.

Which CPUs run bf16 fast is not a rule of flags: a CPU's bf16 dot products, its AMX tiles and the
kernels torch ships decide it together. So where bf16 is native (Capabilities.bf16_native), the first
"auto" times one pass of a BERT layer's Linears (fused query|key|value, attention output,
intermediate, output) at the model's sizes in float32 and in bfloat16, on oneDNN's linear as the
model runs it, and picks bfloat16 when it is at least FASTER_BY faster. The verdict is cached per CPU,
ISA caps, torch version, thread count and sizes, in the process and in the user cache folder
(bertlite.utils.measured), so later processes do not time again. float16 is never picked: its range (65,504) overflows
on real checkpoints' activations, and a NaN vector would be a silently wrong number.

BERTLITE_AUTO_DTYPE=float32|bfloat16 forces the verdict.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bertlite.utils.measured import FASTER_BY, best_of, cache_path, cached_or_timed, machine_key

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
    reason: str  # one line for `bertlite env`
    seconds: dict[str, float] = field(default_factory=dict)  # the timed pass per dtype; empty when not timed

    def ratios(self) -> dict[str, float]:
        """How many times faster than float32 each timed dtype ran (empty when nothing was timed)."""
        if "float32" not in self.seconds:
            return {}
        return {name: self.seconds["float32"] / s for name, s in self.seconds.items()}


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
        seconds, cached = cached_or_timed(key, CANDIDATES, lambda: measure(_shapes(hidden, intermediate)))
        _verdicts[key] = _verdict(
            seconds, f"timed earlier on this CPU (cached in {cache_path()})" if cached else "timed on this CPU"
        )
    return _verdicts[key]


def measure(shapes: Sequence[tuple[int, int]], dtypes: Sequence[str] = CANDIDATES) -> dict[str, float]:
    """Time one pass of Linears of these shapes per dtype, interleaved, best of measured.REPEATS.

    Args:
        shapes: (out_features, in_features) of each Linear.
        dtypes: dtype names; the first is the baseline.

    Returns:
        dtype name -> seconds of the best pass.
    """
    return best_of({name: linear_pass(name, shapes) for name in dtypes})


def _shapes(hidden: int, intermediate: int) -> list[tuple[int, int]]:
    return [(3 * hidden, hidden), (hidden, hidden), (intermediate, hidden), (hidden, intermediate)]


def _verdict(seconds: dict[str, float], how: str) -> Verdict:
    ratio = seconds["float32"] / seconds["bfloat16"]
    dtype = "bfloat16" if ratio >= FASTER_BY else "float32"
    return Verdict(dtype, f"{how}: bfloat16 ran {ratio:.2f}x float32 (picked at >= {FASTER_BY:.2f}x)", seconds)


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
