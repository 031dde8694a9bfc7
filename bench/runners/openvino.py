"""OpenVINO fp32 on the exported ONNX graph, in length-sorted batches of 32."""

from __future__ import annotations

import torch

from bench.runners import Runner, require, sorted_batches_runner
from bench.runners.onnx_export import ONNX_INPUTS, onnx_file


def openvino_runner(model_path: str) -> Runner:
    """The exported graph compiled for the CPU in f32, with torch's thread count.

    Args:
        model_path: the checkpoint folder.

    Returns:
        The runner.

    Raises:
        PeerMissing: openvino (or onnx, onnxruntime for the export) is not installed.
    """
    ov = require("openvino", "openvino")
    onnx = onnx_file(model_path, "exported")
    # f32 precision: on CPUs with bf16 (AVX512-BF16 / AMX) OpenVINO would otherwise run bf16.
    compiled = ov.Core().compile_model(
        str(onnx), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": torch.get_num_threads()}
    )
    output = compiled.output(0)
    return sorted_batches_runner(
        model_path,
        lambda ids, mask, types: compiled(dict(zip(ONNX_INPUTS, (ids, mask, types), strict=True)))[output],
    )
