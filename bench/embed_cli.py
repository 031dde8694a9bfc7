"""`bertlite embed` as a user runs it on the throughput job's texts: a fresh process, jsonl in, .npy out."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import child_env, timed
from bench.runners import BATCH_SIZE


def bench_cli(model_path: str, texts: list[str], baseline: np.ndarray | None = None) -> dict[str, Any]:
    """Time `bertlite embed` with batch size 32 (like the transformers baseline), load to written file.

    Args:
        model_path: the checkpoint folder.
        texts: the texts, written to a jsonl file first.
        baseline: transformers sdpa fp32's vectors of the same texts, to compare with, or None.

    Returns:
        texts, wall_s, texts_per_s_wall, the command's own summary line, and with a baseline
        max_abs_diff_vs_hf_sdpa_fp32_corpus.

    Raises:
        RuntimeError: the command failed.
    """
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp, "in.jsonl"), Path(tmp, "out.npy")
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        command = [sys.executable, "-m", "bertlite.cli", "embed", model_path, "-i", str(source), "-o", str(target)]
        command += ["--quiet", "--batch-size", str(BATCH_SIZE)]
        wall, proc = timed(lambda: subprocess.run(command, capture_output=True, text=True, env=child_env()))
        if proc.returncode != 0:
            raise RuntimeError(f"bertlite embed failed: {proc.stderr}")
        vectors = np.load(target)
    result: dict[str, Any] = {
        "texts": len(texts),
        "wall_s": wall,
        "texts_per_s_wall": len(texts) / wall,
        "summary": proc.stderr.strip().splitlines()[-1],
    }
    if baseline is not None:
        result["max_abs_diff_vs_hf_sdpa_fp32_corpus"] = float(np.abs(vectors - baseline).max())
    return result


def format_cli(result: dict[str, Any]) -> str:
    """bench_cli's result in a few lines."""
    lines = [
        f"bertlite embed (fresh process, load + read + embed + write): {result['wall_s']:.1f} s wall, "
        f"{result['texts_per_s_wall']:.1f} texts/s",
        f"  its summary: {result['summary']}",
    ]
    if "max_abs_diff_vs_hf_sdpa_fp32_corpus" in result:
        lines.append(f"  max abs diff vs transformers sdpa fp32: {result['max_abs_diff_vs_hf_sdpa_fp32_corpus']:.2e}")
    return "\n".join(lines)
