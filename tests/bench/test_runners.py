"""bench's runners measure what their names say."""

from __future__ import annotations

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from bench.runners.torch_dynamic import torch_dynamic_embedder

pytestmark = pytest.mark.slow  # loads and quantizes the real checkpoint


def test_torch_dynamic_int8_quantizes_every_encoder_linear(real_model_path):
    embedder = torch_dynamic_embedder(str(real_model_path))
    encoder = embedder.model.encoder
    quantized = [m for m in encoder.modules() if isinstance(m, DynamicQuantizedLinear)]
    left = [name for name, m in encoder.named_modules() if isinstance(m, torch.nn.Linear)]
    assert left == []
    # query, key, value, attention output, intermediate, output: six per layer
    assert len(quantized) == 6 * len(encoder.layer)
