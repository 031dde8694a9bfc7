"""bertlite int8 against fp32 and torch.ao's dynamic int8, packed and padded: texts/s and cosine to fp32.

Every config embeds the same corpus texts, tokenization included, in rotated rounds after a warm-up
round; the median round counts. bertlite int8 runs the kernels Embedder.from_pretrained readies for it.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from bench.common import add_rounds_arguments, rates, read_corpus, start, table, timed_rounds, write_json
from bench.runners.torch_dynamic import torch_dynamic_embedder

CONFIGS: dict[str, Callable[[str], Any]] = {
    "bertlite_fp32": lambda p: _embedder(p, dtype="float32"),
    "bertlite_fp32_padded": lambda p: _embedder(p, dtype="float32", unpad=False),
    "bertlite_int8": lambda p: _embedder(p, dtype="int8"),
    "bertlite_int8_padded": lambda p: _embedder(p, dtype="int8", unpad=False),
    "torch_dynamic_int8": torch_dynamic_embedder,
    "torch_dynamic_int8_padded": lambda p: torch_dynamic_embedder(p, unpad=False),
}


def _embedder(model_path: str, **kwargs: Any) -> Any:
    from bertlite import Embedder

    return Embedder.from_pretrained(model_path, **kwargs)


def bench_int8(model_path: str, texts: list[str], rounds: int) -> dict[str, Any]:
    """Time every CONFIGS entry in rotated rounds and compare its vectors with bertlite fp32's.

    Args:
        model_path: the checkpoint folder.
        texts: the texts each config embeds per round.
        rounds: timed rounds (after a warm-up round on 64 texts).

    Returns:
        Per config: seconds per round, texts/s, x fp32 (ratio of medians and per round), min and mean cosine.
    """
    from bertlite.quant.int8 import describe_quantization

    embedders = {name: make(model_path) for name, make in CONFIGS.items()}
    for embedder in embedders.values():
        embedder.encode(texts[:64], show_progress_bar=False)
    runs = {name: partial(embedder.encode, texts, show_progress_bar=False) for name, embedder in embedders.items()}
    seconds, vectors = timed_rounds(runs, rounds, 0.0, len(texts))
    configs = rates(seconds, len(texts), "bertlite_fp32", "per_round_x_fp32")
    reference = vectors["bertlite_fp32"]
    for name, r in configs.items():
        cosine = (vectors[name] * reference).sum(1)
        r["x_fp32"] = statistics.median(seconds["bertlite_fp32"]) / statistics.median(seconds[name])
        r.update(min_cosine_vs_fp32=float(cosine.min()), mean_cosine_vs_fp32=float(cosine.mean()))
    return {"texts": len(texts), "rounds": rounds, "input_quantization": describe_quantization(), "configs": configs}


def format_int8(result: dict[str, Any]) -> str:
    """The table of bench_int8's result."""
    return table(
        f"{result['texts']} corpus texts, {torch.get_num_threads()} threads, median of {result['rounds']} "
        f"interleaved rounds; bertlite int8's input quantization: {result['input_quantization']}",
        f"{'config':30} {'texts/s':>8} {'x fp32':>7} {'x fp32/rnd':>10} {'min cos':>8} {'mean cos':>9}",
        (
            f"{name:30} {r['texts_per_s']:8.1f} {r['x_fp32']:7.2f} {r['per_round_x_fp32']:10.2f} "
            f"{r['min_cosine_vs_fp32']:8.5f} {r['mean_cosine_vs_fp32']:9.6f}"
            for name, r in result["configs"].items()
        ),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The int8 job's flags."""
    add_rounds_arguments(parser, texts=300)


def run(args: argparse.Namespace) -> None:
    """Run the int8 job and write the JSON."""
    model_path, env = start(args)
    result = bench_int8(model_path, read_corpus(args.texts), args.rounds)
    print(f"CPU: {env['capabilities']['model_name']}; torch {env['capabilities']['cpu_capability']}")
    print(format_int8(result))
    write_json(args.json, "int8", result, env)
