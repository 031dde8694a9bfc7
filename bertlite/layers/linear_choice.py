"""Which GEMM runs a float32 encoder Linear on this CPU: oneDNN's, its weight packed, or MKL's (torch's F.linear).

Neither wins everywhere: which is faster depends on the CPU and on the Linear's shape. So `optimize` times the
two once per shape (in and out features, bias, and its epilogue: nothing, the residual add, or an activation),
on the module the model runs, by bertlite.utils.measured's rule: oneDNN's is the default, and MKL's is picked
only when it is at least measured.FASTER_BY faster in every round and the rounds agree. Verdicts are kept in
the process and in the timings cache, beside dtype="auto"'s, so a model is timed once per CPU and shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bertlite.utils.measured import Choice, Rounds, decide, machine_key, time_rounds

KERNELS = ("onednn", "mkl")  # the default, then the challenger
KERNEL_DTYPES = (torch.float32,)  # bf16's F.linear runs oneDNN's GEMM too: nothing to choose
# Rows of the timed batch: half the jobs' largest batch, where both GEMMs run at their steady pace, and
# about one sample's work (measured.SAMPLE_SECONDS) per pass at BERT-base's sizes on two cores.
KERNEL_TOKENS = 1024
# What runs a Linear in one of the forms: (linear, activation, pack, kernel) -> module. layers.onednn passes its
# OneDNNLinear (it imports this module, so this one takes it as an argument), and the timing runs that very module.
Build = Callable[[torch.nn.Linear, "str | None", bool, str], torch.nn.Module]


@dataclass(frozen=True)
class LinearShape:
    """What a Linear's kernel choice depends on, besides the CPU and the dtype.

    Attributes:
        in_features, out_features: the Linear's sizes (out_features of query|key|value as one: 3 x hidden).
        epilogue: what runs on the GEMM's output: "none", "add" (the residual), or an activation the oneDNN
            form fuses into its GEMM (a name in layers.onednn.FUSED_ACTIVATIONS).
        bias: whether the Linear has a bias.
    """

    in_features: int
    out_features: int
    epilogue: str = "none"
    bias: bool = True

    def describe(self) -> str:
        """The shape in words, as the cache key and `bertlite env` name it."""
        bias = "" if self.bias else ", no bias"
        return f"{self.in_features} -> {self.out_features}, {self.epilogue} epilogue{bias}"


def encoder_shapes(hidden: int, intermediate: int, activation: str | None) -> dict[str, LinearShape]:
    """A BERT layer's Linear shapes by role, as `optimize` times them.

    Args:
        hidden, intermediate: the model's hidden and intermediate sizes.
        activation: the activation fused into the intermediate GEMM, or None where it runs after it.

    Returns:
        role -> LinearShape, for "qkv", "attention_output", "intermediate" and "output".
    """
    return {
        "qkv": LinearShape(hidden, 3 * hidden),
        "attention_output": LinearShape(hidden, hidden, "add"),
        "intermediate": LinearShape(hidden, intermediate, activation or "none"),
        "output": LinearShape(intermediate, hidden, "add"),
    }


def linear_kernel(dtype: torch.dtype, shape: LinearShape, packed: bool, build: Build) -> str:
    """The kernel a Linear of `shape` runs on this CPU: "mkl" where kernel_choice picked it, else "onednn".

    Args:
        dtype: the Linear's dtype; only KERNEL_DTYPES are timed, the others run oneDNN's.
        shape: the Linear's shape and epilogue.
        packed: whether the oneDNN form keeps its weight in oneDNN's blocked layout.
        build: the module that runs a Linear in each form (layers.onednn.OneDNNLinear), for the timing.

    Returns:
        "onednn" or "mkl".
    """
    if dtype not in KERNEL_DTYPES:
        return KERNELS[0]
    return kernel_choice(dtype, shape, packed, build).picked


def kernel_choice(dtype: torch.dtype, shape: LinearShape, packed: bool, build: Build) -> Choice:
    """time_kernels()'s verdict on this CPU: timed once per shape, kept where its rounds agree
    (bertlite.utils.measured).

    Args:
        dtype, shape, packed, build: as linear_kernel.

    Returns:
        The Choice between "onednn" (the default) and "mkl".
    """
    key = kernel_key(dtype, shape, packed)
    return decide(key, *KERNELS, lambda: time_kernels(dtype, shape, packed, build))


def kernel_key(dtype: torch.dtype, shape: LinearShape, packed: bool) -> str:
    """The timings cache's key of kernel_choice's verdict on this CPU.

    Args:
        dtype, shape, packed: as linear_kernel.

    Returns:
        The key (bertlite.utils.measured.machine_key).
    """
    from bertlite.utils.capabilities import detect

    weight = "packed" if packed else "plain"
    return machine_key(detect(), f"linear kernel: {dtype} {shape.describe()}, oneDNN weight {weight}")


def time_kernels(dtype: torch.dtype, shape: LinearShape, packed: bool, build: Build) -> Rounds:
    """Time the Linear as the model runs it on oneDNN's GEMM and on MKL's, in interleaved rounds.

    Args:
        dtype: the Linear's dtype.
        shape: the Linear's shape and epilogue.
        packed: whether the oneDNN form keeps its weight in oneDNN's blocked layout.
        build: as linear_kernel.

    Returns:
        The Rounds of "onednn" and "mkl" (bertlite.utils.measured.time_rounds).
    """
    generator = torch.Generator().manual_seed(0)  # not torch's global one: readying a model leaves its state be
    linear = torch.nn.Linear(shape.in_features, shape.out_features, bias=shape.bias, device="meta")
    weight = 0.05 * torch.randn(shape.out_features, shape.in_features, generator=generator)
    linear.weight = torch.nn.Parameter(weight.to(dtype), requires_grad=False)
    if shape.bias:
        linear.bias = torch.nn.Parameter(torch.randn(shape.out_features, generator=generator).to(dtype), False)
    x = torch.randn(KERNEL_TOKENS, shape.in_features, generator=generator).to(dtype)
    residual = torch.randn(KERNEL_TOKENS, shape.out_features, generator=generator).to(dtype)
    residual = residual if shape.epilogue == "add" else None
    activation = None if shape.epilogue in ("none", "add") else shape.epilogue
    modules = {kernel: build(linear, activation, packed, kernel) for kernel in KERNELS}
    return time_rounds({kernel: _no_grad(module, x, residual) for kernel, module in modules.items()})


def _no_grad(module: torch.nn.Module, x: Tensor, residual: Tensor | None) -> Callable[[], Tensor]:
    # The modules run their kernels only without autograd, as a readied model does.
    def run() -> Tensor:
        with torch.no_grad():
            return module(x, residual)

    return run
