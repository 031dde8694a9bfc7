"""CTranslate2's Encoder, fp32 or int8, on the checkpoint converted in this run, in length-sorted batches of 32."""

from __future__ import annotations

import numpy as np
import torch

from bench.runners import Runner, require, sorted_batches_runner
from bench.runners.onnx_export import work_folder


def ctranslate2_runner(model_path: str, compute_type: str) -> Runner:
    """The checkpoint converted by CTranslate2's TransformersConverter, run with torch's thread count.

    Args:
        model_path: the checkpoint folder.
        compute_type: "float32" or "int8" (the conversion's quantization and the compute type).

    Returns:
        The runner.

    Raises:
        PeerMissing: ctranslate2 is not installed.
    """
    ct2 = require("ctranslate2", "ctranslate2")
    folder = work_folder() / f"ct2_{compute_type}"
    ct2.converters.TransformersConverter(model_path).convert(str(folder), quantization=compute_type, force=True)
    encoder = ct2.Encoder(str(folder), device="cpu", compute_type=compute_type, intra_threads=torch.get_num_threads())

    def forward(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        lengths = mask.sum(1)
        real = [row[:n].tolist() for row, n in zip(ids, lengths, strict=True)]
        out = encoder.forward_batch(
            real, token_type_ids=[row[:n].tolist() for row, n in zip(types, lengths, strict=True)]
        )
        return np.asarray(out.last_hidden_state)

    return sorted_batches_runner(model_path, forward)
