"""The ONNX graphs ONNX Runtime and OpenVINO run: transformers' BertModel exported in this run, fused, int8."""

from __future__ import annotations

import functools
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from bench.runners import require

ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_folder = tempfile.TemporaryDirectory(prefix="bertlite_bench_")  # removed at exit


def work_folder() -> Path:
    """A temporary folder for this process's converted models, removed at exit."""
    return Path(_folder.name)


def _export(model_path: str, target: Path) -> None:
    import transformers

    model = transformers.AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):  # transformers' forward takes these by keyword only
        def __init__(self) -> None:
            super().__init__()
            self.bert = model  # a submodule, so the trace keeps its weights as parameters

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    # A padded example: an all-ones mask would let the trace drop the masking.
    example = (
        torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]]),
        torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        torch.zeros(2, 4, dtype=torch.long),
    )
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        traced = torch.jit.trace(LastHiddenState(), example, check_trace=False)
        torch.onnx.export(
            traced,
            example,
            target,
            dynamo=False,  # the graph ONNX Runtime's BERT fusions match
            input_names=list(ONNX_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in (*ONNX_INPUTS, "last_hidden_state")},
            opset_version=17,
        )


@functools.cache
def onnx_file(model_path: str, kind: str) -> Path:
    """One ONNX graph of the checkpoint, made once per process.

    Args:
        model_path: the checkpoint folder.
        kind: "exported" (transformers' BertModel exported in this run), "fused" (that, fused by ONNX
            Runtime's BERT optimizer) or "int8" (the fused graph quantized with per-channel weight scales).

    Returns:
        The .onnx file, in work_folder().

    Raises:
        PeerMissing: onnx or onnxruntime is not installed.
    """
    require("onnx", "onnx")
    ort_quantization = require("onnxruntime.quantization", "onnxruntime")
    folder = work_folder()
    if kind == "exported":
        _export(model_path, folder / "model.onnx")
        return folder / "model.onnx"
    if kind == "fused":
        from onnxruntime.transformers import optimizer

        from bertlite import BertConfig

        config = BertConfig.from_pretrained(model_path)
        fused = optimizer.optimize_model(
            str(onnx_file(model_path, "exported")),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
        )
        print(f"  onnxruntime fusions: {fused.get_fused_operator_statistics()}", file=sys.stderr)
        fused.save_model_to_file(str(folder / "fused.onnx"))
        return folder / "fused.onnx"
    if kind == "int8":
        ort_quantization.quantize_dynamic(
            onnx_file(model_path, "fused"),
            folder / "int8.onnx",
            per_channel=True,
            weight_type=ort_quantization.QuantType.QInt8,
            extra_options={"DefaultTensorType": 1},  # FLOAT: the fused ops are outside ONNX's shape inference
        )
        return folder / "int8.onnx"
    raise ValueError(f"kind={kind!r}: choose 'exported', 'fused' or 'int8'")
