"""A throughput result file as the markdown table the docs show: one row per config.

`python -m bench table bench/results/FILE.json` prints the table, with the CPU, date, commit and the
command that produced it under it, so a table in the docs is pasted from its file, not retyped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# Names a reader knows, for the configs a table shows; others keep their config name.
LABELS = {
    "bertlite_fp32": "bertlite float32",
    "bertlite_auto": "bertlite auto",
    "bertlite_bf16": "bertlite bfloat16",
    "bertlite_int8": "bertlite int8",
    "hf_sdpa_fp32_corpus": "transformers sdpa float32, corpus order",
    "hf_sdpa_fp32_sorted": "transformers sdpa float32, length-sorted",
    "hf_sdpa_bf16_sorted": "transformers sdpa bfloat16, length-sorted",
    "sentence_transformers_fp32": "sentence-transformers float32",
    "onnxruntime_fp32_fused_sorted": "ONNX Runtime float32 (fused graph)",
    "onnxruntime_int8_per_channel_sorted": "ONNX Runtime int8 (per channel)",
    "openvino_fp32_sorted": "OpenVINO float32",
    "openvino_default_sorted": "OpenVINO default precision (bf16 where the CPU has it)",
    "ctranslate2_fp32_sorted": "CTranslate2 float32",
    "ctranslate2_int8_sorted": "CTranslate2 int8",
    "torch_dynamic_int8": "torch dynamic int8",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's flags."""
    parser.add_argument("result", type=Path, help="a result file of `python -m bench throughput --json`")
    parser.add_argument("--configs", help="comma-separated configs to show, in the file's order (default: all)")


def table(result: dict[str, Any], configs: list[str] | None = None) -> str:
    """The markdown table of a throughput result, and the line that says where it comes from.

    Args:
        result: the parsed result file.
        configs: the configs to show (default: all the file has).

    Returns:
        The table's lines, joined.
    """
    measured = result["throughput"]["configs"]
    missing = sorted(set(configs or ()) - set(measured))
    if missing:
        raise SystemExit(f"bench table: {', '.join(missing)} not in the file; it has {', '.join(measured)}")
    rows = [
        "| config | texts/s | x bertlite float32 (per round) | min / mean cosine to transformers float32 |",
        "|---|---|---|---|",
    ]
    for name, row in measured.items():
        if configs is not None and name not in configs:
            continue
        cosine = f"{row['min_cosine_vs_hf_eager_fp32']:.5f} / {row['mean_cosine_vs_hf_eager_fp32']:.5f}"
        ratio = f"{row['per_round_x_bertlite_fp32']:.2f}"
        rows.append(f"| {LABELS.get(name, name)} | {row['texts_per_s']:.1f} | {ratio} | {cosine} |")
    throughput = result["throughput"]
    commit = (result.get("commit") or "unknown")[:12] + (" (dirty)" if result.get("dirty") else "")
    rows.append("")
    rows.append(
        f"{result['cpu']}, {result['capabilities']['cpu_capability']}, {throughput['threads']} threads; "
        f"{throughput['texts']} corpus texts, median of {throughput['rounds']} rounds; "
        f"{result['date'][:10]}, commit {commit}; `{result['command']}`"
    )
    return "\n".join(rows)


def run(args: argparse.Namespace) -> None:
    """Print the table of args.result."""
    configs = args.configs.split(",") if args.configs else None
    print(table(json.loads(args.result.read_text(encoding="utf-8")), configs))
