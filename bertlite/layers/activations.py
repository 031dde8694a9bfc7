"""Activation functions by config name (config.hidden_act), as transformers' ACT2FN computes them.

Each is the formula transformers uses for that name, op for op, so the results are identical (not
merely close). Activations with parameters (prelu, xielu) are left out: they would add state_dict keys
BERT checkpoints never have.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def _gelu_new(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _gelu_python_tanh(x: Tensor) -> Tensor:
    return x * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _gelu_accurate(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def _gelu_fast(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def _gelu_python(x: Tensor) -> Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _laplace(x: Tensor, mu: float = 0.707107, sigma: float = 0.282095) -> Tensor:
    x = (x - mu).div(sigma * math.sqrt(2.0))
    return 0.5 * (1.0 + torch.erf(x))


def identity(x: Tensor) -> Tensor:
    # A named function, not a lambda: a model holding it (layers.onednn.optimize sets it) still pickles.
    return x


ACT2FN: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_10": lambda x: torch.clip(F.gelu(x), -10, 10),
    "gelu_accurate": _gelu_accurate,
    "gelu_fast": _gelu_fast,
    "gelu_new": _gelu_new,
    "gelu_python": _gelu_python,
    "gelu_python_tanh": _gelu_python_tanh,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "hardswish": F.hardswish,
    "laplace": _laplace,
    "leaky_relu": F.leaky_relu,
    "linear": identity,
    "mish": F.mish,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu,
    "relu2": lambda x: torch.square(F.relu(x)),
    "relu6": F.relu6,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
    "sqrtsoftplus": lambda x: F.softplus(x).sqrt(),
    "swish": F.silu,
    "tanh": torch.tanh,
}
