"""The token vectors' projection of a multi-vector (ColBERT) model: sentence-transformers' Dense and Normalize
modules, and a Dense read from its folder.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn

from bertlite.checkpoint.load import iter_tensors
from bertlite.errors import CheckpointError
from bertlite.hub import resolve_file
from bertlite.jobs.st.folders import DenseSettings

_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "gelu": nn.functional.gelu, "sigmoid": torch.sigmoid}


class Dense(nn.Module):
    """sentence-transformers' Dense on token vectors: activation(linear(x)), plus x when use_residual."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        activation: str | None = None,
        use_residual: bool = False,
    ) -> None:
        """Args:
        in_features, out_features, bias: the Linear's.
        activation: "tanh", "relu", "gelu", "sigmoid" or None (none).
        use_residual: add the input (through a bias-free Linear when the sizes differ).
        """
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = activation
        self.use_residual = use_residual
        if use_residual and in_features != out_features:
            self.residual = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """(N, in_features) -> (N, out_features)."""
        out = self.linear(x)
        if self.activation is not None:
            out = _ACTIVATIONS[self.activation](out)
        if self.use_residual:
            out = out + (self.residual(x) if hasattr(self, "residual") else x)
        return out


class Normalize(nn.Module):
    """L2-normalize each row, as sentence-transformers' Normalize."""

    def forward(self, x: Tensor) -> Tensor:
        """(N, D) -> (N, D) rows of length 1."""
        return nn.functional.normalize(x, p=2, dim=-1)


def load_dense(name_or_path: str | os.PathLike, dense: DenseSettings, hidden_size: int, hub_kwargs: dict) -> Dense:
    """A Dense module with its weights from the module's folder (safetensors, or .bin read weights-only)."""
    module = Dense(dense.in_features, dense.out_features, dense.bias, dense.activation, dense.use_residual)
    path = None
    for filename in ("model.safetensors", "pytorch_model.bin"):
        path = resolve_file(name_or_path, filename, subfolder=dense.path, **hub_kwargs)
        if path is not None:
            break
    if path is None:
        raise CheckpointError(f"{name_or_path}/{dense.path}: the Dense module has no model.safetensors or .bin")
    state = {key: tensor.float() for key, tensor in iter_tensors(path)}
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        detail = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: Dense weights do not fit its config ({detail})") from e
    if dense.in_features != hidden_size:
        raise CheckpointError(f"{path}: Dense in_features={dense.in_features}, the model's hidden size {hidden_size}")
    return module
