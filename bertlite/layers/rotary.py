"""Rotary positions, as transformers' apply_rotary_pos_emb computes them, for every rotary family (ModernBERT,
GTE, NomicBERT, EuroBERT, jina-embeddings-v3).

`apply_rotary` is the reference (a new tensor, autograd's path). `rotate_query_key` turns the query and key
heads of packed query|key|value rows in place where nothing needs the rows as they were (inference, float32):
the same products and sums, without the reference's concatenations (rotate_half's, and the one that puts query,
key and value back together).
"""

from __future__ import annotations

import torch
from torch import Tensor


def rotate_half(x: Tensor) -> Tensor:
    """(-x2, x1) of the two halves of the last dimension, as transformers' rotate_half.

    Args:
        x: (..., head_dim).

    Returns:
        (..., head_dim).
    """
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x rotated by its positions' angles, computed in float32 as transformers' apply_rotary_pos_emb.

    Args:
        x: queries or keys, (B, nh, T, hs) or packed (N, nh, hs).
        cos, sin: the rotary embedding's, broadcast against x.

    Returns:
        x's shape and dtype.
    """
    x32 = x.float()
    return ((x32 * cos) + (rotate_half(x32) * sin)).to(x.dtype)


def rotate_query_key(qkv: Tensor, rotated_heads: int, head_dim: int, cos: Tensor, sin: Tensor) -> Tensor:
    """Packed rows with their first `rotated_heads` heads (the query's and the key's) rotated, the rest (the
    value's) as they are.

    In place when autograd does not watch and the rows are float32, with apply_rotary's products and sums (the
    same bits); otherwise apply_rotary and a concatenation, in a new tensor.

    Args:
        qkv: (N, W) rows, W a multiple of head_dim; the first rotated_heads * head_dim columns are rotated.
        rotated_heads: the query's heads plus the key's.
        head_dim: the size of a head.
        cos, sin: (N, head_dim), each row's angles.

    Returns:
        (N, W): qkv itself when rotated in place.
    """
    heads = qkv.view(len(qkv), -1, head_dim)  # (N, heads, hs)
    cos, sin = cos[:, None], sin[:, None]
    if torch.is_grad_enabled() or qkv.dtype != torch.float32 or cos.dtype != torch.float32:
        rotated = apply_rotary(heads[:, :rotated_heads], cos, sin)
        return torch.cat([rotated, heads[:, rotated_heads:]], dim=1).view(len(qkv), -1)
    half = head_dim // 2
    query_key = heads[:, :rotated_heads]
    x1, x2 = query_key[..., :half], query_key[..., half:]
    turned = torch.empty_like(query_key)  # rotate_half(x) * sin, one pass per half
    torch.mul(x2, sin[..., :half], out=turned[..., :half]).neg_()  # (-x2) * s1, the same bits as -(x2 * s1)
    torch.mul(x1, sin[..., half:], out=turned[..., half:])
    query_key.mul_(cos).add_(turned)
    return qkv
