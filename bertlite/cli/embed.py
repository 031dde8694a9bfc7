"""`bertlite embed`: files of texts in, vectors out (one process, or many files on Ray)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from bertlite.cli import embed_tasks
from bertlite.cli.args import add_command, add_model_placement
from bertlite.cli.loading import load_job
from bertlite.cli.writing import (
    NonFinite,
    Terminated,
    exit_on_sigterm,
    for_cli,
    input_job,
    resume_rows,
    write_output,
)
from bertlite.jobs.st.folders import DEFAULT_POOLING, POOLING_MODES

if TYPE_CHECKING:  # the embedder imports torch, which --help and argument errors never need
    from bertlite.files.writers import VectorWriter
    from bertlite.jobs.embedder import Embedder

EMBED_HELP = """\
Embed every text of a file with a BERT checkpoint: one vector per input row.

Pooling, normalization and max length come from the checkpoint's
sentence-transformers metadata when it has some (so all-MiniLM-L6-v2 gives
SentenceTransformer's vectors); otherwise mean pooling, no normalization, and
the model's max length. Options override both.

Inputs: .txt (one text per line, empty lines included), .jsonl (--field),
.csv / .tsv (--field names the column), or - for stdin (txt unless
--input-format). Outputs: .npy (float32 matrix, row i = input row i), .jsonl
({"id": i, "embedding": [...]}), .parquet (needs pyarrow). The output is
written to a temporary file and renamed at the end: a failed or interrupted run
leaves no partial file, and an existing OUTPUT is kept until the new one is
complete (then replaced, keeping its permissions; --no-overwrite refuses).
The input is read, embedded and written in chunks: memory does not grow with
its length, and stdin may be endless. \\n, \\r\\n and a lone \\r each end a line.
A run that is killed outright leaves its temporary file; the next run that
completes the same output removes it, and --resume continues from its rows.

--task picks the job (default auto: by the checkpoint's files). A SPLADE
checkpoint gives sparse vectors, one jsonl line per row {"id": i, "indices":
[...], "values": [...]} (indices ascending); a ColBERT (multi-vector) one gives
{"id": i, "embedding": [[...], ...]}, one vector per kept token, as does
--task token-embeddings with an embedding model (every token's last hidden
state). These tasks write .jsonl only; --as-query encodes the rows as queries
(sentence-transformers' encode_query) instead of documents. A cross-encoder is
refused: score pairs with `bertlite rerank`.

--engine ray (pip install 'bertlite[ray]') embeds many files on Ray Data with
--replicas model copies: -i takes glob patterns ('data/*.jsonl', quoted) and may
be repeated; -o names a folder of parquet files with columns source (input
path), line (0-based row of that file, counted as above) and embedding (+ text
with --keep-text). Without --ray-address it starts a local Ray; --ray-address
auto joins the cluster of `ray start --head`.

exit status: 0 done, 1 failed while embedding or writing (a full disk, a NaN vector),
2 usage / input / load error, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `embed` command and its options, in the order --help lists them.

    Args:
        commands: the `bertlite` parser's subcommands.
    """
    p = add_command(
        commands,
        "embed",
        help="embed a file of texts into vectors",
        description=EMBED_HELP,
        model_help="a folder or a hub id",
    )
    _add_file_arguments(p)
    _add_encoding_arguments(p)
    _add_prompt_arguments(p)
    embed_tasks.add_task_arguments(p)
    add_model_placement(p, extra_dtypes=("int8",))
    _add_run_arguments(p)
    _add_ray_arguments(p)


def _add_file_arguments(p: argparse.ArgumentParser) -> None:
    """Add the input and output files and how the input is read: -i, -o, --field, --input-format, --errors.

    Args:
        p: the `embed` parser.
    """
    p.add_argument(
        "-i",
        "--input",
        required=True,
        action="append",
        metavar="INPUT",
        help="input file, glob pattern, or - for stdin; repeat -i for several files (--engine ray)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUTPUT",
        help="output file: .npy, .jsonl or .parquet; with --engine ray a folder (new or empty)",
    )
    p.add_argument("--field", default="text", help="jsonl field / csv or tsv column holding the text (default: text)")
    p.add_argument("--input-format", choices=["txt", "jsonl", "csv", "tsv"], help="override the input's extension")
    p.add_argument(
        "--errors",
        choices=["strict", "replace"],
        default="strict",
        help="invalid UTF-8 in the input: strict = stop with the line number, replace = use U+FFFD",
    )


def _add_encoding_arguments(p: argparse.ArgumentParser) -> None:
    """Add how texts are batched, truncated and pooled: --batch-size, --max-tokens, --pooling, --normalize,
    --max-length, --on-long.

    Args:
        p: the `embed` parser.
    """
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="at most N texts per batch (default: batches by a token budget, see --max-tokens)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="cap batch size x longest text per batch (default: 2048 when --batch-size is not given)",
    )
    p.add_argument(
        "--pooling",
        choices=POOLING_MODES,
        help=f"default: from the checkpoint's metadata, else {DEFAULT_POOLING}",
    )
    p.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalize the vectors (default: from the metadata, else no)",
    )
    p.add_argument("--max-length", type=int, metavar="L", help="truncate texts to L tokens")
    p.add_argument(
        "--on-long",
        choices=["truncate", "error"],
        default="truncate",
        help="texts longer than the max length: truncate (counted in the summary) or stop",
    )


def _add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    """Add what goes before each text and how much of each vector is kept: --prompt-name or --prompt,
    and --truncate-dim.

    Args:
        p: the `embed` parser.
    """
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument(
        "--prompt-name",
        metavar="NAME",
        help="put the checkpoint's prompt NAME (config_sentence_transformers.json 'prompts') before every text "
        "(default: its default_prompt_name, if any)",
    )
    prompt.add_argument("--prompt", metavar="TEXT", help="put TEXT before every text, e.g. 'query: '")
    p.add_argument(
        "--truncate-dim",
        type=int,
        metavar="N",
        help="keep the first N dimensions of each vector (Matryoshka models; as sentence-transformers' truncate_dim)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Add what the run does with an existing or half-written output, and its progress bar: --overwrite,
    --resume, --quiet.

    Args:
        p: the `embed` parser.
    """
    p.add_argument(
        "--overwrite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="replace an existing OUTPUT, keeping its permissions (default); --no-overwrite refuses to",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the rows an earlier run of the same job wrote before it died (.npy and .jsonl), "
        "and if this run fails, keep its rows for the next --resume",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar, and no note that --dtype auto may run faster")


def _add_ray_arguments(p: argparse.ArgumentParser) -> None:
    """Add the "distributed (--engine ray)" group: --engine, --ray-address, --replicas, --threads-per-replica,
    --keep-text.

    Args:
        p: the `embed` parser.
    """
    ray = p.add_argument_group("distributed (--engine ray)")
    ray.add_argument(
        "--engine",
        choices=["single", "ray"],
        default="single",
        help="single = this process (default); ray = Ray Data actors, one model per replica",
    )
    # Ray-only options default to None so the single engine can refuse them by name.
    ray.add_argument("--ray-address", metavar="ADDR", help="Ray cluster to join, e.g. auto (default: a new local Ray)")
    ray.add_argument("--replicas", type=int, metavar="N", help="model copies (Ray actors) working at once (default 2)")
    ray.add_argument(
        "--threads-per-replica",
        type=int,
        metavar="T",
        help="torch threads per replica, and CPUs Ray reserves for it (default 1)",
    )
    ray.add_argument("--keep-text", action="store_true", default=None, help="also write each row's text")


def run(args: argparse.Namespace) -> int:
    from bertlite.errors import InputError
    from bertlite.files.readers import expand_inputs

    def fail(message: str) -> int:
        print(f"bertlite embed: error: {message}", file=sys.stderr)
        return 2

    for name in ("batch_size", "max_tokens", "max_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return fail(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.engine != "ray" and args.task != "auto" and (message := embed_tasks.check_options(args, args.task)):
        return fail(message)
    if args.engine == "ray":
        return _embed_ray(args, fail)
    given = [f"--{name.replace('_', '-')}" for name in RAY_ONLY if getattr(args, name) is not None]
    if given:
        return fail(f"{', '.join(given)}: for --engine ray only")
    try:
        inputs = expand_inputs(args.input)
    except InputError as e:
        return fail(str(e))
    if len(inputs) != 1:
        return fail(
            f"{len(inputs)} inputs ({', '.join(inputs[:3])}{', ...' if len(inputs) > 3 else ''}): "
            "the single engine writes one output row per row of one input; use --engine ray for several files"
        )
    args.input = inputs[0]
    return exit_on_sigterm("embed", lambda: _embed_single(args, fail))


def _embed_single(args: argparse.Namespace, fail: Callable[[str], int]) -> int:
    import itertools
    import time

    from bertlite.errors import InputError
    from bertlite.files.readers import iter_texts
    from bertlite.files.writers import check_output_path, require_pyarrow

    try:
        # Everything that can be refused is refused here, before the model loads or a row is embedded.
        check_output_path(args.output, overwrite=args.overwrite, inputs=[args.input])
        reading = (args.input_format, args.field, args.errors)
        if args.output.endswith(".parquet"):
            if args.resume:
                raise InputError(
                    f"{args.output}: --resume takes .npy or .jsonl (a parquet file is unreadable until finished)"
                )
            require_pyarrow()
        # A regular file is read twice, row by row: first to check every row (a bad line is
        # refused before any work) and count them for the progress bar, then to embed. Stdin
        # and pipes are read once, so their bad rows stop the run when reached (no output either).
        once = args.input == "-" or not os.path.isfile(args.input)
        total = None if once else sum(1 for _ in iter_texts(args.input, *reading))
        rows = iter_texts(args.input, *reading)
        first = list(itertools.islice(rows, 1))  # stdin: an empty or bad first row is said now
        replacing = os.path.exists(args.output)
        task = embed_tasks.task_for(args)
        if task == "embedding":
            embedder = load_job(args, task)
            embedder.resolve_prompt(args.prompt, args.prompt_name)
    except (InputError, OSError, ValueError) as e:
        return fail(for_cli(e))
    if task != "embedding":
        return embed_tasks.embed_task(args, task, itertools.chain(first, rows), total, replacing, fail)
    start = time.perf_counter()

    def fill(writer: VectorWriter) -> None:
        _embed_rows(args, embedder, itertools.chain(first, rows), total, writer)

    code, resumed = write_output(args, fail, embedder.dimension, _job(args, embedder), fill, "a vector")
    if code is not None:
        return code
    seconds = time.perf_counter() - start
    stats = embedder.last_stats
    precision = embedder.precision
    if precision == "int8":  # whether the compiled (C++ or torch.compile) quantization ran (bertlite.quant.int8)
        from bertlite.quant.int8 import compiled_quantization_built

        precision += ", compiled quantization" if compiled_quantization_built() else ", eager quantization"
    print(
        f"embedded {stats.texts} texts ({stats.tokens} tokens, {stats.truncated} truncated) in {seconds:.1f} s "
        f"({precision}): "
        f"{stats.texts / max(seconds, 1e-9):.1f} texts/s -> {args.output}{' (replaced)' if replacing else ''}"
        f"{f' (after {resumed} rows of an earlier run)' if resumed else ''}",
        file=sys.stderr,
    )
    return 0


def _embed_rows(
    args: argparse.Namespace, embedder: Embedder, rows: Iterator[str], total: int | None, writer: VectorWriter
) -> None:
    """Embed the rows into the writer, after the rows it resumes after (checked to be the same)."""
    import numpy as np

    digest, rows = resume_rows(args, rows, writer)
    resumed = writer.written
    for first_row, vectors in embedder.encode_chunks(
        rows,
        args.batch_size,
        show_progress_bar=not args.quiet,
        max_tokens=args.max_tokens,
        on_long=args.on_long,
        total=total,
        prompt_name=args.prompt_name,
        prompt=args.prompt,
        first_row=resumed,
    ):
        array = vectors.numpy()
        finite = np.isfinite(array).all(axis=1)
        if not finite.all():
            raise NonFinite(first_row + int(np.argmin(finite)))
        Terminated.check()
        writer.write(array)
        writer.save_progress(digest.hexdigest())


def _job(args: argparse.Namespace, embedder: Embedder) -> dict[str, object]:
    """What makes this run's vectors, as a resumed run must match it (JSON values)."""
    return {
        **input_job(args),
        "precision": embedder.precision,
        "pooling": list(embedder.pooling),
        "normalize": embedder.normalize,
        "max_length": embedder.max_length,
        "prompt": embedder.resolve_prompt(args.prompt, args.prompt_name),
        "truncate_dim": args.truncate_dim,
    }


RAY_ONLY = ("ray_address", "replicas", "threads_per_replica", "keep_text")


def _prompt_flags(args: argparse.Namespace) -> list[tuple[str, object]]:
    return [("--prompt-name", args.prompt_name), ("--prompt", args.prompt), ("--truncate-dim", args.truncate_dim)]


def _embed_ray(args: argparse.Namespace, fail: Callable[[str], int]) -> int:
    # bertlite.files.ray imports ray only inside its functions: a missing Ray
    # shows as RayNotInstalledError here, with the install hint.
    from bertlite.errors import InputError, RayNotInstalledError
    from bertlite.files.ray import embed_dataset

    if args.device not in (None, "cpu"):
        return fail("--device applies to the single engine; Ray replicas run on CPU")
    given = [flag for flag, value in _prompt_flags(args) if value is not None]
    if given:
        return fail(f"{', '.join(given)}: not supported with --engine ray yet")
    if args.resume:
        return fail("--resume: for the single engine only")
    try:
        refusal = embed_tasks.ray_refusal(args)
    except (OSError, ValueError) as e:
        return fail(for_cli(e))
    if refusal:
        return fail(refusal)
    try:
        result = embed_dataset(
            args.model,
            args.input,
            args.output,
            field=args.field,
            input_format=args.input_format,
            errors=args.errors,
            encode_batch_size=args.batch_size,
            num_replicas=args.replicas or 2,
            threads_per_replica=args.threads_per_replica or 1,
            keep_text=bool(args.keep_text),
            dtype=args.dtype,
            pooling=args.pooling,
            normalize=args.normalize,
            max_length=args.max_length,
            pack_weights=args.pack_weights,
            max_tokens=args.max_tokens,
            on_long=args.on_long,
            ray_address=args.ray_address,
            show_progress=not args.quiet,
        )
    except (RayNotInstalledError, InputError, OSError, ValueError) as e:
        return fail(str(e))
    except Exception as e:  # a Ray task or actor failed for good: the job is not done
        print(f"bertlite embed: error: the Ray job failed: {e}; no output written", file=sys.stderr)
        return 1
    print(
        f"embedded {result.rows} texts with {args.replicas or 2} Ray replicas in {result.seconds:.1f} s: "
        f"{result.rows_per_s:.1f} texts/s -> {args.output} ({len(result.files)} parquet files)",
        file=sys.stderr,
    )
    return 0
