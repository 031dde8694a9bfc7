"""What the inference modules of layers.onednn and layers.gated share: the copies of weights they derive and
keep beside the Parameters (a concatenation, a split, oneDNN's blocked layout), and when their oneDNN forms run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

ONEDNN_DTYPES = (torch.float32, torch.bfloat16)
# The row count oneDNN is told to expect when it picks the packed layout: Embedder's batches hold
# up to 2048 tokens; other row counts run on the same layout.
PACK_ROWS = 2048


def pack_weight(weight: Tensor) -> Tensor:
    """weight (out, in) in oneDNN's blocked layout, for the modules' packed copies (packing_works first)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)


def derived(owner: Any, slot: str, sources: Sequence[Tensor], build: Callable[[], Any]) -> Any:
    """build()'s result, kept in owner.__dict__[slot]: a plain attribute, so state_dict() and
    save_pretrained never see it. It is rebuilt when any source tensor is replaced or changed in
    place (its storage, its version counter, dtype or device moves), so loading, training or .to()
    never leave it stale."""
    key = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in sources)
    cached = owner.__dict__.get(slot)
    if cached is None or cached[0] != key:
        owner.__dict__[slot] = cached = (key, build())
    return cached[1]


class KeepsDerived:
    """Pickling and deepcopy leave the derived copies out (a packed oneDNN weight has no storage to
    copy); the copy rebuilds them at its first call."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_derived_")}


def runs_on_onednn(x: Tensor) -> bool:
    """Whether a module's oneDNN form takes `x`: autograd (training through an optimized model) and tensors
    oneDNN does not take run the reference ops."""
    return not torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype in ONEDNN_DTYPES
