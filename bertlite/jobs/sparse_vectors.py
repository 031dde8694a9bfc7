"""Sparse vectors in sentence-transformers' forms: the top-k cut, a pooled batch's non-zero entries, the
tensors encode() returns (sparse COO or dense, stacked or a list), and the batches similarity() reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

SparseRow = tuple[np.ndarray, np.ndarray]  # (indices int64 ascending, values float32) of one vector


def keep_top(pooled: Tensor, top_k: int | None) -> Tensor:
    """The largest top_k values of each row, the rest zero (sentence-transformers' select_max_active_dims)."""
    if top_k is None or top_k >= pooled.shape[1]:
        return pooled
    values, indices = torch.topk(pooled, top_k, dim=1)  # the values are >= 0: their absolute values
    return torch.zeros_like(pooled).scatter_(1, indices, values)


def sparse_parts(pooled: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Per row: ((nnz,) column indices ascending, (nnz,) values) of its non-zero entries."""
    rows, columns = pooled.nonzero(as_tuple=True)  # row-major order: each row's columns ascending
    values = pooled[rows, columns]
    counts = torch.bincount(rows, minlength=pooled.shape[0]).tolist()
    return list(zip(columns.split(counts), values.split(counts), strict=True)) if counts else []


def assemble(
    rows: list[Any], vocab_size: int, device: torch.device, as_tensor: bool, sparse: bool, single: bool
) -> Tensor | list[Tensor]:
    """encode()'s result from its per-row parts, in sentence-transformers' forms."""
    if not sparse:
        vectors = [row.to(device) for row in rows]
        if not as_tensor:
            return vectors[0] if single else vectors
        stacked = torch.stack(vectors) if vectors else torch.tensor([], device=device)
        return stacked[0] if single else stacked
    if not as_tensor:
        vectors = [
            torch.sparse_coo_tensor(c[None], v, (vocab_size,), device=device, check_invariants=False).coalesce()
            for c, v in rows
        ]
        return vectors[0] if single else vectors
    if not rows:
        return torch.tensor([], device=device).to_sparse()
    row_ids = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor([len(v) for _, v in rows]))
    indices = torch.stack([row_ids.to(device), torch.cat([c.to(device) for c, _ in rows])])
    values = torch.cat([v.to(device) for _, v in rows])
    stacked = torch.sparse_coo_tensor(
        indices, values, (len(rows), vocab_size), is_coalesced=True, check_invariants=False
    )
    return stacked[0] if single else stacked


def as_batch(embeddings: Tensor | np.ndarray | list[Tensor]) -> Tensor:
    if isinstance(embeddings, list):
        embeddings = torch.stack([e.coalesce() if e.is_sparse else e for e in embeddings])
    tensor = torch.as_tensor(embeddings) if not isinstance(embeddings, Tensor) else embeddings
    tensor = tensor.float()
    return tensor.unsqueeze(0) if tensor.ndim == 1 else tensor


def unit_rows(matrix: Tensor) -> Tensor:
    dense = matrix.to_dense() if matrix.is_sparse else matrix
    unit = torch.nn.functional.normalize(dense, p=2, dim=1)
    return unit.to_sparse() if matrix.is_sparse else unit


def join_chunks(chunks: list[Any], as_tensor: bool, device: torch.device) -> Tensor | list[Tensor]:
    """encode()'s result from the results of its chunks (a pool's): one tensor (sparse COO coalesced, or
    dense) or one list, on `device`."""
    if not as_tensor:
        return [vector.to(device) for chunk in chunks for vector in chunk]
    joined = torch.cat(chunks)
    return (joined.coalesce() if joined.is_sparse else joined).to(device)
