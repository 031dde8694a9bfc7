"""Calibration for int8: the activation ranges of a few short texts, and what they decide.

SmoothQuant's factors (Xiao et al. 2022) move outlier channels, which every token shares, from the
activations into the weights; the largest outlier channels of GELU's output stay float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from bertlite.layers.roles import model_layers

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# A channel is an outlier when its calibration max exceeds this multiple of the median channel's.
OUTLIER_RATIO = 6.0

# Calibration: short, varied English (prose, code talk, questions, lists, numbers), one text a line, for the
# activation ranges SmoothQuant needs. Written for bertlite, not taken from any data set.
CALIBRATION_TEXTS = resources.files("bertlite.quant").joinpath("calibration_texts.txt").read_text("utf-8").splitlines()


def outlier_channels(activation: Tensor, ratio: float = OUTLIER_RATIO) -> Tensor:
    """Find the input channels whose calibration maximum is an outlier (see OUTLIER_LINEARS).

    Args:
        activation: (K,) max |input| per input channel (activation_ranges).
        ratio: an outlier's maximum exceeds ratio x the median channel's.

    Returns:
        (k,) long channel indices, often empty.
    """
    return (activation > ratio * activation.median()).nonzero().flatten()


def smoothing_factors(activation: Tensor, linears: Sequence[nn.Linear], alpha: float) -> Tensor:
    """Compute SmoothQuant's s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha), per input channel j.

    Args:
        activation: (K,) max |input| per input channel (activation_ranges).
        linears: the Linears that share that input (their weights' column maxima are combined).
        alpha: the migration strength, between 0 and 1.

    Returns:
        (K,) factors s.
    """
    weight = torch.cat([m.weight.detach().abs().amax(dim=0, keepdim=True) for m in linears]).amax(dim=0)
    s = activation.clamp(min=1e-5).pow(alpha) / weight.clamp(min=1e-5).pow(1 - alpha)
    return s.clamp(min=1e-5)


def activation_ranges(model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str]) -> dict[nn.Linear, Tensor]:
    """Measure max |input| per input channel of every encoder Linear in the fp32 model.

    Over the real tokens of `texts`, run as one padded batch; padding rows are left out.

    Args:
        model: the fp32 model.
        tokenizer: its tokenizer.
        texts: the calibration texts.

    Returns:
        Each encoder nn.Linear -> (in_features,) maxima.

    Raises:
        ValueError: texts is empty or holds something other than str.
    """
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("calibration_texts must be a non-empty list of str")
    limit = model.config.max_sequence_length
    encodings = [e.ids[:limit] for e in tokenizer.encode_batch(list(texts))]
    width = max(len(ids) for ids in encodings)
    # Padded with the pad id: a RoBERTa-family model counts positions from the ids that are not padding.
    ids = torch.full((len(encodings), width), model.config.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros(len(encodings), width, dtype=torch.bool)
    for row, tokens in enumerate(encodings):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = True
    ranges: dict[nn.Linear, Tensor] = {}

    def record(module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        x = inputs[0].detach()
        # Another input than the batch's tokens (DeBERTa's relative position table through query/key) counts whole.
        rows = x[mask] if x.shape[:-1] == mask.shape else x.reshape(-1, x.shape[-1])
        channel_max = rows.abs().amax(dim=0)  # (K,)
        ranges[module] = torch.maximum(ranges[module], channel_max) if module in ranges else channel_max

    hooks = [m.register_forward_pre_hook(record) for m in model_layers(model).modules() if isinstance(m, nn.Linear)]
    was_training = model.training
    model.eval()
    try:
        # No token_type_ids: all 0 by default, and a family without token types (DistilBERT) takes none.
        model.base_model(input_ids=ids, attention_mask=mask.long())
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return ranges
