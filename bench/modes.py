"""Each job in float32, auto and int8: its speed beside its accuracy bar, in rotated rounds (`throughput --jobs`).

Per job, bertlite loads the model three times (dtype None, "auto", "int8") and runs the job's public call
(Embedder.encode, CrossEncoder.predict, SparseEncoder.encode, MultiVectorEncoder.encode_document) on the
same corpus texts, tokenization included, in rotated rounds after an idle pause (bench.common.timed_rounds).
The median round counts, with each mode's per-round ratio to float32, the precision it ran
(`encoder.precision`; for auto, `encoder.precision_reason` says why), and auto's and int8's answers on these
texts held to the job's bar against float32's (bertlite.jobs.bars).

Only embed has a real checkpoint (all-MiniLM-L6-v2). rerank, sparse and multi-vector run its encoder
weights under a seeded random head, built as bench.rerank, bench.sparse and build_colbert_folder build
them: their speed is a real model's, their bar values are a random head's (a trained head's differ).
"""

from __future__ import annotations

import statistics
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import per_round_ratio, read_corpus, timed_rounds
from bench.rerank import build_cross_encoder, rerank_pairs
from bench.runners import MAX_LENGTH
from bench.sparse import build_splade_folder
from bertlite.jobs import bars

# job -> the bertlite class that loads its folder (by name: bertlite imports it when a job runs)
JOBS = {"embed": "Embedder", "rerank": "CrossEncoder", "sparse": "SparseEncoder", "multi-vector": "MultiVectorEncoder"}
MODES = {"float32": None, "auto": "auto", "int8": "int8"}  # config -> the dtype from_pretrained takes
PER_QUERY = 20  # rerank: passages per query, as bench.rerank's default
COLBERT_DIM = 128  # the built ColBERT projection's output, as ColBERT v2's
NOTE = (
    "embed runs the checkpoint's real weights; rerank, sparse and multi-vector its real encoder weights under a "
    "seeded random head (no such checkpoint is offline): their speed is a real model's, their bar values a random "
    "head's. The bars compare auto and int8 with float32 on the timed texts (bertlite.jobs.bars); auto's own "
    "choice was made on bars.CALIBRATION_TEXTS (precision_reason)."
)


@dataclass(frozen=True)
class Job:
    """One job as the modes benchmark runs it."""

    folder: Path  # the model folder the three modes load
    inputs: list[Any]  # texts, or (query, passage) pairs
    run: Callable[[Any, list[Any]], Any]  # (encoder, inputs) -> the job's answer, as a user gets it (timed)
    hold: Callable[[Any, Any, str], bars.Measured]  # (float32's answer, a mode's, "bfloat16"/"int8") -> the bar
    model: str  # what the folder holds, for the result


def build_colbert_folder(model_path: str, folder: Path, seed: int = 0) -> Path:
    """A ColBERT model of real size saved by sentence-transformers' MultiVectorEncoder: `model_path`'s encoder
    and tokenizer, a seeded random Dense hidden -> COLBERT_DIM without bias, a punctuation skiplist, Normalize.

    Args:
        model_path: a BERT checkpoint folder (its encoder weights and tokenizer are used).
        folder: where sentence-transformers saves the model (its BertModel goes to folder-hf).
        seed: the projection's random init.

    Returns:
        The folder.
    """
    import transformers
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    base = folder.with_name(folder.name + "-hf")
    model = transformers.AutoModel.from_pretrained(model_path, add_pooling_layer=False)
    model.save_pretrained(base)
    transformers.AutoTokenizer.from_pretrained(model_path).save_pretrained(base)
    torch.manual_seed(seed)
    dense = Dense(
        model.config.hidden_size,
        COLBERT_DIM,
        bias=False,
        activation_function=torch.nn.Identity(),
        module_input_name="token_embeddings",
    )
    modules = [
        Transformer(str(base), max_seq_length=MAX_LENGTH),
        dense,
        MultiVectorMask(skiplist_words=list(string.punctuation)),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, device="cpu").save_pretrained(str(folder))
    return folder


def sparse_rows(vectors: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    """A sparse (n, vocab) COO tensor as bars.sparse takes it: per row its (indices, values)."""
    vectors = vectors.coalesce()
    rows, columns = vectors.indices().numpy()
    values = vectors.values().numpy()
    bounds = np.searchsorted(rows, np.arange(vectors.shape[0] + 1))  # coalesced: sorted by row
    return [(columns[a:b], values[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def make_job(name: str, model_path: str, scratch: Path, count: int) -> Job:
    """Build one job's model folder (embed: the checkpoint itself) and its inputs.

    Args:
        name: a key of JOBS.
        model_path: the BERT checkpoint folder (all-MiniLM-L6-v2 by default).
        scratch: a folder for the built models.
        count: texts (rerank: pairs) per round.

    Returns:
        The Job.
    """
    texts = read_corpus(count)
    if name == "embed":
        return Job(
            Path(model_path),
            texts,
            lambda encoder, inputs: encoder.encode(inputs, show_progress_bar=False),
            bars.embeddings,
            "the checkpoint itself: real weights",
        )
    if name == "rerank":
        pairs = rerank_pairs(read_corpus(), count, PER_QUERY)
        groups = [list(range(q, min(q + PER_QUERY, len(pairs)))) for q in range(0, len(pairs), PER_QUERY)]
        return Job(
            build_cross_encoder(model_path, scratch / "cross-encoder"),
            pairs,
            lambda encoder, inputs: encoder.predict(inputs, show_progress_bar=False),
            partial(bars.scores, groups=groups),
            f"the checkpoint's encoder + a seeded random 1-label classifier (bench.rerank); (query, passage) pairs, "
            f"{PER_QUERY} per query; the scores bar on sigmoid scores, each query's passages in order",
        )
    if name == "sparse":
        return Job(
            build_splade_folder(model_path, scratch / "splade"),
            texts,
            lambda encoder, inputs: sparse_rows(encoder.encode(inputs, show_progress_bar=False)),
            bars.sparse,
            "the checkpoint's encoder + a seeded random MLM head, its bias set for ~200 active dims (bench.sparse), "
            "SpladePooling max",
        )
    if name == "multi-vector":
        return Job(
            build_colbert_folder(model_path, scratch / "colbert"),
            texts,
            lambda encoder, inputs: encoder.encode_document(inputs, convert_to_numpy=True, show_progress_bar=False),
            bars.maxsim,
            f"the checkpoint's encoder + a seeded random Dense to {COLBERT_DIM} (no bias), a punctuation skiplist, "
            "Normalize; encode_document",
        )
    raise ValueError(f"{name!r} is not a job; choose from {', '.join(JOBS)}")


def bench_job(name: str, job: Job, rounds: int, pause_s: float) -> dict[str, Any]:
    """Time one job's three modes in rotated rounds and hold auto's and int8's answers to the job's bar.

    Args:
        name: a key of JOBS.
        job: make_job's Job.
        rounds: timed rounds, after one warm-up call per mode on 16 inputs.
        pause_s: seconds idle before each timed run.

    Returns:
        inputs, model; per mode its precision, precision_reason, seconds per round, median, texts/s, per-round
        ratio to float32 and (auto, int8) its bar: the mode it was held to, passed, summary.
    """
    import bertlite

    cls = getattr(bertlite, JOBS[name])
    encoders = {mode: cls.from_pretrained(job.folder, dtype=dtype) for mode, dtype in MODES.items()}
    for encoder in encoders.values():
        job.run(encoder, job.inputs[:16])  # warm-up: first-call allocations and kernel selection
    runs = {mode: partial(job.run, encoder, job.inputs) for mode, encoder in encoders.items()}
    seconds, answers = timed_rounds(runs, rounds, pause_s, len(job.inputs), label=f"{name} ")
    configs = {}
    for mode, encoder in encoders.items():
        median = statistics.median(seconds[mode])
        configs[mode] = {
            "precision": encoder.precision,
            "precision_reason": encoder.precision_reason,
            "seconds": seconds[mode],
            "median_s": median,
            "texts_per_s": len(job.inputs) / median,
            "per_round_x_float32": per_round_ratio(seconds["float32"], seconds[mode]),
            "bar": None,
        }
        if mode != "float32":
            # a mode that ran float32 (auto where bfloat16 missed the bar) is held to bfloat16's bar
            held = encoder.precision if encoder.precision in ("bfloat16", "int8") else "bfloat16"
            measured = job.hold(answers["float32"], answers[mode], held)
            configs[mode]["bar"] = {"mode": held, "passed": measured.passed, "summary": measured.summary}
    return {"inputs": len(job.inputs), "model": job.model, "configs": configs}


def bench_modes(
    model_path: str, jobs: Sequence[str], counts: dict[str, int], rounds: int, pause_s: float, scratch: Path
) -> dict[str, Any]:
    """Run bench_job for each job, building the jobs' models from `model_path` in `scratch`.

    Args:
        model_path: the BERT checkpoint folder.
        jobs: keys of JOBS, in order.
        counts: texts (rerank: pairs) per round, by job.
        rounds: timed rounds per job.
        pause_s: seconds idle before each timed run.
        scratch: a folder for the built models.

    Returns:
        rounds, pause_s, threads, the attention and int8 kernels in use, and per job bench_job's record.
    """
    from bertlite.layers import native_attention
    from bertlite.quant.allocator import keep_freed_memory
    from bertlite.quant.int8 import describe_quantization

    allocator_kept = keep_freed_memory()  # as bench_throughput: one allocator setting for every mode
    results = {
        name: bench_job(name, make_job(name, model_path, scratch, counts[name]), rounds, pause_s) for name in jobs
    }
    return {
        "note": NOTE,
        "rounds": rounds,
        "pause_s": pause_s,
        "threads": torch.get_num_threads(),
        "allocator_thresholds_raised": allocator_kept,
        "cpu_attention": native_attention.describe(),
        "int8_input_quantization": describe_quantization(),
        "jobs": results,
    }


def format_modes(result: dict[str, Any]) -> str:
    """The table of bench_modes' result: per job and mode, the precision run, texts/s, x float32 and the bar."""
    lines = [
        f"Modes: each job in float32 / auto / int8 on the same corpus texts, median of {result['rounds']} rotated "
        f"rounds, {result['threads']} threads; bars against float32 on these texts (bertlite.jobs.bars)",
        f"{'job':<14}{'config':<9}{'precision':<10}{'inputs':>7}{'texts/s':>9}{'x fp32':>8}  bar",
    ]
    for name, job in result["jobs"].items():
        for mode, r in job["configs"].items():
            bar = r["bar"]
            verdict = "-" if bar is None else f"{'pass' if bar['passed'] else 'MISS'} ({bar['mode']}): {bar['summary']}"
            lines.append(
                f"{name:<14}{mode:<9}{r['precision']:<10}{job['inputs']:>7}{r['texts_per_s']:>9.1f}"
                f"{r['per_round_x_float32']:>7.2f}x  {verdict}"
            )
    lines.append("auto's reason, per job:")
    lines += [f"  {name}: {job['configs']['auto']['precision_reason']}" for name, job in result["jobs"].items()]
    lines.append(result["note"])
    lines.append("models:")
    lines += [f"  {name}: {job['model']}" for name, job in result["jobs"].items()]
    return "\n".join(lines)
