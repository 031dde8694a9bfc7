import pytest
import torch
from transformers.activations import ACT2FN as HF_ACT2FN

from bertlite.modeling import ACT2FN

REQUIRED = [
    "gelu",
    "gelu_new",
    "gelu_pytorch_tanh",
    "gelu_fast",
    "gelu_python",
    "quick_gelu",
    "relu",
    "silu",
    "swish",
    "tanh",
]


def test_required_names_present():
    assert set(REQUIRED) <= set(ACT2FN)


@pytest.mark.parametrize("name", sorted(ACT2FN))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bitwise_equal_to_transformers(name, dtype):
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0)).mul(4).to(dtype)
    expected = HF_ACT2FN[name](x)
    assert torch.equal(ACT2FN[name](x), expected)
