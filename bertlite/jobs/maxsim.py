"""Late-interaction scores: MaxSim (each query token's best match among a document's tokens, summed) and
MeanMaxSim, over token vectors in sentence-transformers' forms (a list of (tokens, dim) items, or a
zero-padded (n, tokens, dim) batch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

# sentence-transformers' score for a document without any token to match.
EMPTY_DOCUMENT_SCORE = -1e9


def _as_items(embeddings: Any) -> list[Tensor]:
    """A side of a score as (tokens, dim) float32 tensors: a list, one 2D item, or a zero-padded 3D batch."""
    if isinstance(embeddings, np.ndarray | Tensor):
        embeddings = torch.as_tensor(embeddings)
        if embeddings.ndim == 2:
            return [embeddings.float()]
        if embeddings.ndim != 3:
            shape = tuple(embeddings.shape)
            raise ValueError(f"expected (tokens, dim) or (n, tokens, dim) token vectors, got shape {shape}")
        # sentence-transformers reads all-zero rows of a padded batch as padding.
        return [item[item.any(dim=-1)].float() for item in embeddings]
    return [torch.as_tensor(item).float() for item in embeddings]


def _padded(items: list[Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    width = max((len(item) for item in items), default=0)
    dim = next((item.shape[-1] for item in items if len(item)), 1)
    grid = torch.zeros(len(items), width, dim, device=device)
    mask = torch.zeros(len(items), width, dtype=torch.bool, device=device)
    for row, item in enumerate(items):
        grid[row, : len(item)] = item.to(device)
        mask[row, : len(item)] = True
    return grid, mask


def maxsim(queries: Any, documents: Any, length_normalize: bool = False) -> Tensor:
    """MaxSim of every query with every document: sum over query tokens of the best document-token dot product.

    Args:
        queries, documents: token vectors (see MultiVectorEncoder.similarity).
        length_normalize: divide by each query's token count (MeanMaxSim).

    Returns:
        float32 (n_queries, n_documents) tensor, on the documents' device; a document without
        tokens scores -1e9, as in sentence-transformers.
    """
    q_items, d_items = _as_items(queries), _as_items(documents)
    device = d_items[0].device if d_items else torch.device("cpu")
    scores = torch.zeros(len(q_items), len(d_items), device=device)
    if not d_items:
        return scores
    docs, mask = _padded(d_items, device)  # (D, T, dim), (D, T)
    for row, q in enumerate(q_items):
        sims = torch.einsum("sh,dth->dst", q.to(device), docs)  # (D, S, T)
        sims.masked_fill_(~mask[:, None, :], torch.finfo(sims.dtype).min)
        best = sims.max(dim=-1).values if docs.shape[1] else sims.new_zeros(len(d_items), len(q))
        scores[row] = best.sum(dim=-1) / (max(len(q), 1) if length_normalize else 1)
    return scores.masked_fill(~mask.any(dim=1)[None, :], EMPTY_DOCUMENT_SCORE)


def maxsim_pairwise(queries: Any, documents: Any, length_normalize: bool = False) -> Tensor:
    """MaxSim of query i with document i.

    Args:
        queries, documents: token vectors, the same number of each.
        length_normalize: divide by each query's token count (MeanMaxSim).

    Returns:
        float32 (n,) tensor.

    Raises:
        ValueError: different numbers of queries and documents.
    """
    q_items, d_items = _as_items(queries), _as_items(documents)
    if len(q_items) != len(d_items):
        raise ValueError(f"pairwise scores need as many queries as documents, got {len(q_items)} and {len(d_items)}")
    scores = [maxsim([q], [d], length_normalize)[0, 0] for q, d in zip(q_items, d_items, strict=True)]
    return torch.stack(scores) if scores else torch.zeros(0)
