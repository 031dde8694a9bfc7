"""layers.gated.GatedProduct: a gated feed-forward's act(gate) * up in two oneDNN GEMMs, against torch's ops."""

import pytest
import torch
from torch import nn

from bertlite.layers.activations import ACT2FN
from bertlite.layers.gated import GatedProduct, product_works
from bertlite.layers.onednn import FUSED_ACTIVATIONS, activation_fusion_works

pytestmark = pytest.mark.skipif(not product_works(torch.float32), reason="oneDNN's linear with a product runs here")


@pytest.mark.parametrize("activation", ["gelu", "silu", "gelu_new"])
@pytest.mark.parametrize("layout", ["fused-first", "fused-second", "separate"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pack", [True, False])
def test_the_product_is_torchs_for_each_layout(activation: str, layout: str, bias: bool, pack: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(37, 16)
    if layout == "separate":
        linears = (nn.Linear(16, 24, bias=bias), nn.Linear(16, 24, bias=bias))
        gate, up = linears
        weights = (gate.weight, up.weight)
        biases = (gate.bias, up.bias)
    else:
        linears = (nn.Linear(16, 48, bias=bias),)
        halves = linears[0].weight.chunk(2)
        bias_halves = linears[0].bias.chunk(2) if bias else (None, None)
        first = layout == "fused-first"
        weights = halves if first else halves[::-1]
        biases = bias_halves if first else bias_halves[::-1]
    fused = activation in ("gelu", "silu") and activation_fusion_works(activation, torch.float32)
    epilogue = FUSED_ACTIVATIONS[activation] if fused else None
    module = GatedProduct(linears, layout == "fused-first", activation, epilogue, pack)
    with torch.no_grad():
        out = module(x)
        gate = torch.nn.functional.linear(x, weights[0], biases[0])
        up = torch.nn.functional.linear(x, weights[1], biases[1])
        expected = ACT2FN[activation](gate) * up
    assert out.shape == (37, 24) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_autograd_runs_the_linears_and_a_changed_weight_is_read_again() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(8, 12)
    module = GatedProduct((linear,), False, "gelu", None, True)
    x = torch.randn(5, 8)
    module(x).sum().backward()  # the Linear's own forward: its Parameters get gradients
    assert linear.weight.grad is not None and linear.weight.grad.abs().sum() > 0
    with torch.no_grad():
        before = module(x)
        linear.weight.mul_(2)  # in place: the derived halves must be rebuilt
        after = module(x)
        up, gate = linear(x).chunk(2, dim=-1)
    assert not torch.equal(before, after)
    torch.testing.assert_close(after, ACT2FN["gelu"](gate) * up, atol=1e-5, rtol=1e-5)
    assert not any(isinstance(t, nn.Parameter) for t in module.state_dict().values()) and not module.state_dict()
