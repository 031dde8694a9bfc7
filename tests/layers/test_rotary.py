"""layers.rotary: rotate_query_key's in-place rotation gives apply_rotary's bits; autograd gets the reference."""

import pytest
import torch

from bertlite.layers.rotary import apply_rotary, rotate_query_key


def angles(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    freqs = positions[:, None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize(("query_heads", "key_heads", "head_dim"), [(4, 4, 8), (6, 2, 16), (3, 3, 6)])
def test_in_place_rotation_gives_the_references_bits(query_heads: int, key_heads: int, head_dim: int) -> None:
    torch.manual_seed(0)
    rows = 29
    heads = query_heads + 2 * key_heads  # query, key, value
    qkv = 3 * torch.randn(rows, heads * head_dim)
    cos, sin = angles(torch.randint(0, 4096, (rows,)), head_dim)
    split = qkv.view(rows, heads, head_dim)
    rotated = query_heads + key_heads
    expected = torch.cat([apply_rotary(split[:, :rotated], cos[:, None], sin[:, None]), split[:, rotated:]], dim=1)
    with torch.no_grad():
        out = rotate_query_key(qkv.clone(), rotated, head_dim, cos, sin)
    assert torch.equal(out, expected.view(rows, -1))


def test_autograd_and_bf16_get_a_new_tensor_from_the_reference() -> None:
    torch.manual_seed(0)
    qkv = torch.randn(7, 3 * 16, requires_grad=True)
    cos, sin = angles(torch.arange(7), 8)
    out = rotate_query_key(qkv, 4, 8, cos, sin)
    out.sum().backward()
    assert out is not qkv and qkv.grad is not None
    rows = qkv.detach().to(torch.bfloat16)
    with torch.no_grad():
        low = rotate_query_key(rows, 4, 8, cos, sin)
    expected = apply_rotary(rows.view(7, 6, 8)[:, :4], cos[:, None], sin[:, None])
    assert low is not rows and torch.equal(low.view(7, 6, 8)[:, :4], expected)
    assert torch.equal(low.view(7, 6, 8)[:, 4:], rows.view(7, 6, 8)[:, 4:])
