"""dtype names as transformers' keywords take them (dtype=, torch_dtype=)."""

from __future__ import annotations

import torch

FLOAT_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "half": torch.float16,
    "float": torch.float32,
}


def parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | str | None:
    """A torch dtype from a dtype or its name; "auto" passes through (resolved per checkpoint)."""
    if dtype is None or dtype == "auto":
        return dtype
    value = FLOAT_DTYPES.get(dtype.removeprefix("torch.")) if isinstance(dtype, str) else dtype
    if value not in FLOAT_DTYPES.values():
        raise ValueError(f"dtype={dtype!r} is not supported (use float32, bfloat16, float16, float64 or 'auto')")
    return value
