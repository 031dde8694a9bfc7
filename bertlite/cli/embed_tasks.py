"""`bertlite embed --task`: the jobs beside dense embeddings (SPLADE, multi-vector, per-token vectors) into jsonl.

embed.py reads and checks the input, then hands a row iterator here when the task is not "embedding";
rows are tokenized, run and written a chunk at a time, as the embedding path does.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from bertlite.cli.loading import load_job

TASKS = ("auto", "embedding", "sparse", "multi-vector", "token-embeddings")
# Rows tokenized, run and written together (and saved for --resume); memory stays flat however long the input.
CHUNK_ROWS = 2048
# What each task's rows are, for messages.
_MADE = {"sparse": "a sparse vector", "multi-vector": "token vectors", "token-embeddings": "token embeddings"}
# Options that only some tasks use: flag -> the tasks it applies to.
_APPLIES = {
    "--pooling": ("embedding",),
    "--normalize": ("embedding",),
    "--truncate-dim": ("embedding", "multi-vector"),
    "--as-query": ("sparse", "multi-vector"),
}


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    """--task and --as-query of `bertlite embed`."""
    p.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="auto = by the checkpoint's files (default): embedding, sparse (SPLADE) or multi-vector (ColBERT; "
        "a BGE-M3 folder: its dense vectors, and with sparse / multi-vector its lexical weights / ColBERT vectors); "
        "token-embeddings = an embedding model's vector for every token. Tasks other than embedding write .jsonl",
    )
    p.add_argument(
        "--as-query",
        action="store_true",
        help="sparse and multi-vector: encode the rows as queries (the query prompt; ColBERT's query length "
        "and [MASK] expansion), as encode_query does; default: as documents (encode_document)",
    )


def task_for(args: argparse.Namespace) -> str:
    """The task this run does, with its options checked: --task, or for auto the checkpoint's kind.

    Returns:
        "embedding", "sparse", "multi-vector" or "token-embeddings".

    Raises:
        InputError: a cross-encoder checkpoint (naming `bertlite rerank`), or an option the task does
            not take (see check_options).
        ValueError, OSError: what reading the checkpoint's metadata raises.
    """
    from bertlite.errors import InputError

    task = args.task
    if task == "auto":
        task = auto_task(args.model)
        if task == "cross-encoder":
            raise InputError(
                f"{args.model} is a cross-encoder: it scores (query, text) pairs, it does not embed texts; "
                f"use bertlite rerank {args.model} --query TEXT -i INPUT -o scores.jsonl"
            )
    message = check_options(args, task)
    if message:
        raise InputError(message)
    return task


def auto_task(model: str) -> str:
    """--task auto's task: the checkpoint's kind; a BGE-M3 folder's is its dense vectors ("embedding").

    Raises:
        ValueError, OSError: what reading the checkpoint's metadata raises.
    """
    from bertlite.jobs.kinds import detect_kind

    kind = detect_kind(model)
    return "embedding" if kind == "m3" else kind


def check_options(args: argparse.Namespace, task: str) -> str | None:
    """The one-line refusal of an option `task` does not take, or of a non-jsonl output; None: all fit."""
    given = {
        "--pooling": args.pooling is not None,
        "--normalize": args.normalize is not None,
        "--truncate-dim": args.truncate_dim is not None,
        "--as-query": args.as_query,
    }
    for flag, used in given.items():
        if used and task not in _APPLIES[flag]:
            return f"{flag} does not apply to --task {task} (it applies to {', '.join(_APPLIES[flag])})"
    if task != "embedding" and not args.output.endswith(".jsonl"):
        rows = "indices and values" if task == "sparse" else "a list of token vectors"
        return f"{args.output}: --task {task} writes .jsonl only (one line of {rows} per row); name a .jsonl output"
    return None


def ray_refusal(args: argparse.Namespace) -> str | None:
    """Why --engine ray cannot run this task (it writes dense embeddings only); None: it can.

    Raises:
        ValueError, OSError: what reading the checkpoint's metadata raises (--task auto).
    """
    task = auto_task(args.model) if args.task == "auto" else args.task
    if task != "embedding":
        return f"--task {task}: --engine ray writes dense embeddings only; run it with the single engine"
    if args.as_query:
        return "--as-query does not apply to --task embedding (it applies to sparse, multi-vector)"
    return None


def embed_task(
    args: argparse.Namespace,
    task: str,
    rows: Iterator[str],
    total: int | None,
    replacing: bool,
    fail: Callable[[str], int],
) -> int:
    """Run `task` on the input rows into args.output (jsonl, one record per row, in order).

    Args:
        args: `bertlite embed`'s arguments.
        task: "sparse", "multi-vector" or "token-embeddings" (task_for's answer).
        rows: the input's texts, from the first.
        total: their count for the progress bar; None: not known (stdin).
        replacing: whether args.output existed before the run.
        fail: reports a usage error and returns its exit status.

    Returns:
        The exit status.
    """
    from bertlite.cli.writing import for_cli, write_output
    from bertlite.errors import InputError

    try:
        model = load_job(args, task)
        prompt = _prompt(args, task, model)
    except (InputError, OSError, ValueError) as e:
        return fail(for_cli(e))
    start = time.perf_counter()
    stats = _Stats()

    def fill(writer: Any) -> None:
        _write_rows(args, task, model, prompt, rows, total, writer, stats)

    code, resumed = write_output(args, fail, None, _job(args, task, model, prompt), fill, _MADE[task])
    if code is not None:
        return code
    seconds = time.perf_counter() - start
    print(
        f"encoded {stats.texts} texts as {task} ({stats.tokens} tokens, {stats.truncated} truncated) in "
        f"{seconds:.1f} s ({model.precision}): {stats.texts / max(seconds, 1e-9):.1f} texts/s -> {args.output}"
        f"{' (replaced)' if replacing else ''}{f' (after {resumed} rows of an earlier run)' if resumed else ''}",
        file=sys.stderr,
    )
    return 0


class _Stats:
    texts = tokens = truncated = 0


def _prompt(args: argparse.Namespace, task: str, model: Any) -> str | None:
    """The text put before every row, as encode_query / encode_document (or Embedder.encode) pick it;
    None for a multi-vector model left to its task's prompt.

    Raises:
        ValueError: an unknown --prompt-name.
    """
    name = args.prompt_name
    if task == "sparse" and args.prompt is None and name is None:
        # sentence-transformers' encode_query / encode_document: the task's prompt when the model has one.
        names = ("query",) if args.as_query else ("document", "passage", "corpus")
        name = next((n for n in names if n in model.prompts), None)
    if task == "multi-vector" and args.prompt is None and name is None:
        return None
    return model.resolve_prompt(args.prompt, name)


def _write_rows(
    args: argparse.Namespace,
    task: str,
    model: Any,
    prompt: str | None,
    rows: Iterator[str],
    total: int | None,
    writer: Any,
    stats: _Stats,
) -> None:
    """Tokenize, run and write the rows a chunk at a time, after those the writer resumes after."""
    import numpy as np

    from bertlite.cli.writing import NonFinite, Terminated, resume_rows
    from bertlite.jobs.base import progress_bar, with_prompt
    from bertlite.jobs.kinds import kind_of

    digest, rows = resume_rows(args, rows, writer)
    start = writer.written
    m3 = kind_of(model) == "m3"
    progress = progress_bar(total, not args.quiet, initial=start)
    try:
        while chunk := list(itertools.islice(rows, CHUNK_ROWS)):
            if task == "multi-vector" and not m3:
                encodings = model.encodings(chunk, args.as_query, args.on_long, start, prompt=prompt)
            else:
                encodings = model.encodings(with_prompt(chunk, prompt or ""), args.on_long, first_index=start)
            batch = {"max_tokens": args.max_tokens}
            if task == "token-embeddings":
                batch["output_value"] = "token_embeddings"
            elif m3:  # BGE-M3's lexical weights or ColBERT vectors, in the other jobs' forms
                batch["output_value"] = "sparse" if task == "sparse" else "colbert_vecs"
            results = model.encode_tokenized(encodings, args.batch_size, **batch)
            stats.texts += len(chunk)
            stats.tokens += model.last_stats.tokens
            stats.truncated += model.last_stats.truncated
            records = []
            for i, result in enumerate(results):
                arrays = result if task == "sparse" else (result,)
                if not all(np.isfinite(a).all() for a in arrays):
                    raise NonFinite(start + i)
                if task == "sparse":
                    records.append({"indices": result[0].tolist(), "values": result[1].tolist()})
                else:
                    records.append({"embedding": result.tolist()})
            Terminated.check()
            writer.write_records(records)
            writer.save_progress(digest.hexdigest())
            progress.update(len(chunk))
            start += len(chunk)
    finally:
        progress.close()


def _job(args: argparse.Namespace, task: str, model: Any, prompt: str | None) -> dict[str, object]:
    """What makes this run's rows, as a resumed run must match it (JSON values)."""
    from bertlite.cli.writing import input_job

    return {
        "task": task,
        "as_query": args.as_query,
        **input_job(args),
        "precision": model.precision,
        "max_length": model.max_length,
        "prompt": prompt,
        "truncate_dim": getattr(model, "truncate_dim", None) if task == "multi-vector" else None,
    }
