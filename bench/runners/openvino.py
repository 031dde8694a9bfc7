"""OpenVINO on the exported ONNX graph, in length-sorted batches of 32: in f32, or at its default precision."""

from __future__ import annotations

import torch

from bench.runners import Runner, require, sorted_batches_runner
from bench.runners.onnx_export import ONNX_INPUTS, onnx_file


def openvino_runner(model_path: str, precision: str | None = "f32") -> Runner:
    """The exported graph compiled for the CPU, with torch's thread count.

    Args:
        model_path: the checkpoint folder.
        precision: OpenVINO's INFERENCE_PRECISION_HINT ("f32"); None: its default, which is bf16 on CPUs with
            AVX512-BF16 or AMX (what its users get).

    Returns:
        The runner.

    Raises:
        PeerMissing: openvino (or onnx, onnxruntime for the export) is not installed.
    """
    ov = require("openvino", "openvino")
    onnx = onnx_file(model_path, "exported")
    settings = {"INFERENCE_NUM_THREADS": torch.get_num_threads()}
    if precision is not None:
        settings["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(str(onnx), "CPU", settings)
    output = compiled.output(0)
    return sorted_batches_runner(
        model_path,
        lambda ids, mask, types: compiled(dict(zip(ONNX_INPUTS, (ids, mask, types), strict=True)))[output],
    )
