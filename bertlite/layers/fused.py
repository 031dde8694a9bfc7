"""A fused Linear (query|key|value, up|gate) run as the separate Linears a reference model holds.

jina-embeddings-v3's checkpoints and module tree hold one fused Wqkv (its task adapters span the three parts)
where transformers' modules hold three Linears. One GEMM over the fused weight may round apart from the separate
ones, because a GEMM's reduction order may follow its output width; run as blocks, each output matches the
reference's on any CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def fused_linear(linear: nn.Module, x: Tensor, parts: int, tasks: Tensor | None = None) -> Tensor:
    """`linear(x)`, as `parts` GEMMs over its weight's row blocks where it is a plain nn.Linear.

    A swapped-in module (the CPU's oneDNN Linear, int8) runs whole: it was chosen for speed and its own numbers
    are checked against the reference's tolerance. A task-adapter Linear (layers.lora, `runs_as_linear`) runs as
    blocks too, its adapters added after.

    Args:
        linear: the fused Linear, its output `parts` blocks of equal width.
        x: (..., in_features).
        parts: how many Linears the reference holds in its place.
        tasks: each row's task, for a task-adapter Linear; None: no adapter.

    Returns:
        (..., out_features), the blocks concatenated in order.
    """
    adapters = getattr(linear, "runs_as_linear", False)
    if type(linear) is not nn.Linear and not adapters:
        return linear(x)
    weights = linear.weight.chunk(parts)
    biases = linear.bias.chunk(parts) if linear.bias is not None else (None,) * parts
    out = torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases, strict=True)], dim=-1)
    return linear.add_adapters(out, x, tasks) if adapters else out
