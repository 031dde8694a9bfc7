"""The throughput job's configurations: name -> (the dtype whose GEMM peak applies, a runner factory), and groups."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.runners import BATCH_SIZE, Runner
from bench.runners.bertlite import bertlite_runner
from bench.runners.ctranslate2 import ctranslate2_runner
from bench.runners.onnxruntime import onnxruntime_runner
from bench.runners.openvino import openvino_runner
from bench.runners.sentence_transformers import sentence_transformers_runner
from bench.runners.torch_dynamic import torch_dynamic_int8_runner
from bench.runners.transformers import transformers_runner

CONFIGS: dict[str, tuple[str, Callable[[str], Runner]]] = {
    "bertlite_fp32": ("fp32", lambda p: bertlite_runner(p, None)),
    "bertlite_bf16": ("bf16", lambda p: bertlite_runner(p, "bfloat16")),
    "bertlite_fp32_bs32": ("fp32", lambda p: bertlite_runner(p, None, BATCH_SIZE)),
    "hf_sdpa_fp32_corpus": ("fp32", lambda p: transformers_runner(p, "sdpa", torch.float32, sort=False)),
    "hf_sdpa_fp32_sorted": ("fp32", lambda p: transformers_runner(p, "sdpa", torch.float32, sort=True)),
    "hf_sdpa_bf16_sorted": ("bf16", lambda p: transformers_runner(p, "sdpa", torch.bfloat16, sort=True)),
    # for a model transformers runs without sdpa (MPNet): its best attention is eager (bench.families)
    "hf_eager_fp32_sorted": ("fp32", lambda p: transformers_runner(p, "eager", torch.float32, sort=True)),
    "sentence_transformers_fp32": ("fp32", sentence_transformers_runner),
    # the packed attention implementations of bertlite.layers.attention, for --configs attention
    "bertlite_fp32_auto_attention": ("fp32", lambda p: bertlite_runner(p, None, attn_implementation="auto")),
    "bertlite_fp32_per_sequence": ("fp32", lambda p: bertlite_runner(p, None, attn_implementation="per_sequence")),
    "bertlite_fp32_nested": ("fp32", lambda p: bertlite_runner(p, None, attn_implementation="nested")),
    "bertlite_fp32_padded_batches": ("fp32", lambda p: bertlite_runner(p, None, BATCH_SIZE, unpad=False)),
    "bertlite_fp32_unpacked_weights": ("fp32", lambda p: bertlite_runner(p, None, pack_weights=False)),
    "bertlite_auto": ("auto", lambda p: bertlite_runner(p, "auto")),
    # peers a user would pick instead, each only when installed
    "onnxruntime_fp32_fused_sorted": ("fp32", lambda p: onnxruntime_runner(p, "fused")),
    "onnxruntime_int8_per_channel_sorted": ("int8", lambda p: onnxruntime_runner(p, "int8")),
    "openvino_fp32_sorted": ("fp32", openvino_runner),
    # OpenVINO's default precision: bf16 where the CPU has it (AVX512-BF16, AMX), so bf16's peak applies
    "openvino_default_sorted": ("bf16", lambda p: openvino_runner(p, None)),
    "ctranslate2_fp32_sorted": ("fp32", lambda p: ctranslate2_runner(p, "float32")),
    "ctranslate2_int8_sorted": ("int8", lambda p: ctranslate2_runner(p, "int8")),
    # int8 (bertlite.quant.int8), and torch.ao's dynamic int8 on the same Linears, for --configs int8
    "bertlite_int8": ("int8", lambda p: bertlite_runner(p, "int8")),
    "torch_dynamic_int8": ("int8", torch_dynamic_int8_runner),
}
PEER_CONFIGS = [name for name in CONFIGS if name.split("_")[0] in ("onnxruntime", "openvino", "ctranslate2")]
GROUPS: dict[str, list[str]] = {
    "default": [
        "bertlite_fp32",
        "bertlite_bf16",
        "bertlite_fp32_bs32",
        "hf_sdpa_fp32_corpus",
        "hf_sdpa_fp32_sorted",
        "hf_sdpa_bf16_sorted",
        "sentence_transformers_fp32",
        "bertlite_auto",
        *PEER_CONFIGS,
    ],
    "attention": [
        "bertlite_fp32",
        "bertlite_fp32_auto_attention",
        "bertlite_fp32_per_sequence",
        "bertlite_fp32_nested",
        "bertlite_fp32_padded_batches",
        "bertlite_fp32_bs32",
    ],
    "peers": PEER_CONFIGS,
    "int8": ["bertlite_fp32", "bertlite_int8", "torch_dynamic_int8"],
    "none": [],
}


def expand(spec: str) -> list[str]:
    """Config names from a comma-separated list of names and GROUPS, in order, each once.

    Args:
        spec: e.g. "default,bertlite_int8".

    Returns:
        The names.

    Raises:
        ValueError: a name that is neither a config nor a group.
    """
    names = list(dict.fromkeys(n for c in spec.split(",") if c for n in GROUPS.get(c, [c])))
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configs {unknown}; choose from {', '.join(CONFIGS)} or {', '.join(GROUPS)}")
    return names
