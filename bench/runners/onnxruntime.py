"""ONNX Runtime on the fused fp32 graph or its int8 quantization, in length-sorted batches of 32."""

from __future__ import annotations

import torch

from bench.runners import Runner, require, sorted_batches_runner
from bench.runners.onnx_export import ONNX_INPUTS, onnx_file


def onnxruntime_runner(model_path: str, kind: str) -> Runner:
    """An InferenceSession on the CPU with torch's thread count.

    Args:
        model_path: the checkpoint folder.
        kind: the graph, "fused" or "int8" (see onnx_export.onnx_file).

    Returns:
        The runner.

    Raises:
        PeerMissing: onnxruntime (or onnx) is not installed.
    """
    ort = require("onnxruntime", "onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(onnx_file(model_path, kind)), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]  # the fused graph may drop token_type_ids
    return sorted_batches_runner(
        model_path,
        lambda ids, mask, types: session.run(
            None, {n: a for n, a in zip(ONNX_INPUTS, (ids, mask, types), strict=True) if n in names}
        )[0],
    )
