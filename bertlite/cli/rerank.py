"""`bertlite rerank`: score (query, text) pairs with a cross-encoder, file in, scores out."""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from bertlite.cli.args import add_command, add_model_placement
from bertlite.cli.loading import load_job

if TYPE_CHECKING:  # the cross-encoder imports torch, which --help and argument errors never need
    from bertlite.jobs.cross_encoder import CrossEncoder

RERANK_HELP = """\
Score (query, text) pairs with a cross-encoder (reranker or classifier) checkpoint.

Pairs come from one query and a file of texts (--query 'what is bert?' -i
docs.jsonl), or from a file whose rows hold both (-i pairs.jsonl, fields
--query-field and --field; csv/tsv columns alike). Inputs: .txt (one text per
line; with --query only), .jsonl, .csv, .tsv, or - for stdin (with --query).

The output is .jsonl, one line per input row in input order: {"id": i, "score": s}
for a one-logit model (the checkpoint's activation applied, as
sentence-transformers' CrossEncoder.predict; --raw-scores for the logit), or
{"id": i, "scores": [...], "label": "..."} for a model with several labels. With
--top-k K only the K best rows are written, best first. The output is written to
a temporary file and renamed at the end: a failed, interrupted or terminated run
leaves no partial file, and an existing OUTPUT stays as it was. With --query, the
query is tokenized once per 2,048 texts, not once per text.

exit status: 0 done, 1 failed while scoring or writing, 2 usage / input / load
error, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM)."""

# Pairs tokenized and run together; memory stays flat however long the input.
CHUNK_PAIRS = 2048


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = add_command(
        commands,
        "rerank",
        help="score (query, text) pairs with a cross-encoder",
        description=RERANK_HELP,
        model_help="a cross-encoder folder or hub id",
    )
    p.add_argument("-i", "--input", required=True, metavar="INPUT", help="input file, or - for stdin")
    p.add_argument("-o", "--output", required=True, metavar="OUTPUT", help="output .jsonl file")
    p.add_argument("--query", metavar="TEXT", help="the query every text of INPUT is paired with")
    p.add_argument("--field", default="text", help="jsonl field / csv or tsv column of the text (default: text)")
    p.add_argument(
        "--query-field",
        default="query",
        help="without --query: jsonl field / csv or tsv column of each row's query (default: query)",
    )
    p.add_argument("--input-format", choices=["txt", "jsonl", "csv", "tsv"], help="override the input's extension")
    p.add_argument(
        "--errors",
        choices=["strict", "replace"],
        default="strict",
        help="invalid UTF-8 in the input: strict = stop with the line number, replace = use U+FFFD",
    )
    p.add_argument("--batch-size", type=int, metavar="N", help="at most N pairs per batch")
    p.add_argument("--max-tokens", type=int, metavar="N", help="cap batch size x longest pair per batch")
    p.add_argument("--max-length", type=int, metavar="L", help="truncate pairs to L tokens (longest side first)")
    p.add_argument("--raw-scores", action="store_true", help="write the logits, without the checkpoint's activation")
    p.add_argument("--top-k", type=int, metavar="K", help="write only the K best rows, best first")
    add_model_placement(p, extra_dtypes=("int8",))
    p.add_argument(
        "--overwrite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="replace an existing OUTPUT (default); --no-overwrite refuses to",
    )
    p.add_argument("--quiet", action="store_true", help="no summary line, and no note that --dtype auto may run faster")


def run(args: argparse.Namespace) -> int:
    from bertlite.cli.writing import exit_on_sigterm

    return exit_on_sigterm("rerank", lambda: _rerank(args))


def _rerank(args: argparse.Namespace) -> int:
    from bertlite.cli.writing import Terminated
    from bertlite.errors import InputError
    from bertlite.files.writers import VectorWriter, check_output_path

    def fail(message: str) -> int:
        print(f"bertlite rerank: error: {message}", file=sys.stderr)
        return 2

    for name in ("batch_size", "max_tokens", "max_length", "top_k"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return fail(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    try:
        check_output_path(args.output, overwrite=args.overwrite, inputs=[args.input])
        if not args.output.endswith(".jsonl"):
            raise InputError(f"{args.output}: rerank writes .jsonl (one line of scores per input row)")
        pairs = _pairs(args)
        first = list(itertools.islice(pairs, 1))  # a bad first row (a missing field) is said before the load
        model = load_job(args, "cross-encoder")
    except (InputError, OSError, ValueError) as e:
        from bertlite.cli.writing import for_cli

        return fail(for_cli(e))
    start = time.perf_counter()
    try:
        with VectorWriter(args.output, None, None, overwrite=args.overwrite, job={"model": args.model}) as writer:
            rows = _score(model, itertools.chain(first, pairs), args)
            if args.top_k is not None:
                best = sorted(rows, key=lambda row: -_key(row))[: args.top_k]
                rows = iter(best)
            for chunk in _chunks(rows):
                Terminated.check()  # a SIGTERM that came inside a finalizer, where its exception was lost
                writer.write_records(chunk)
            count = writer.written
            Terminated.check()  # the last moment before the rename
    except (InputError, ValueError) as e:  # a bad row, or a pair with an empty side
        return fail(f"{e}; no output written")
    except OSError as e:
        print(
            f"bertlite rerank: error: writing {args.output} failed: {e.strerror or e}; no output written",
            file=sys.stderr,
        )
        return 1
    if not args.quiet:
        seconds = time.perf_counter() - start
        print(
            f"scored {model.last_stats.texts} pairs in {seconds:.1f} s ({model.precision}) -> {args.output}"
            f"{f' ({count} best)' if args.top_k is not None else ''}",
            file=sys.stderr,
        )
    return 0


def _pairs(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """The input's (query, text) pairs, read as they are scored.

    Raises:
        InputError: pairs that cannot come from this input (a .txt or stdin without --query).
    """
    from bertlite.errors import InputError
    from bertlite.files.readers import input_format, iter_texts

    fmt = input_format(args.input, args.input_format)
    if args.query is not None:
        return ((args.query, text) for text in iter_texts(args.input, fmt, args.field, args.errors))
    if fmt == "txt":
        raise InputError(
            f"{args.input}: a .txt file holds one text per line; give --query, or a .jsonl/.csv/.tsv file "
            f"with {args.query_field!r} and {args.field!r} fields"
        )
    if args.input == "-":
        raise InputError("pairs are read from a file (its two fields in step); with stdin, give --query")
    # The file read twice in step, one field each: pairs stream without a second parser.
    queries = iter_texts(args.input, fmt, args.query_field, args.errors)
    return zip(queries, iter_texts(args.input, fmt, args.field, args.errors), strict=True)


def _score(model: CrossEncoder, pairs: Iterator[tuple[str, str]], args: argparse.Namespace) -> Iterator[dict]:
    """One record per pair, in input order, scored CHUNK_PAIRS at a time."""
    import numpy as np

    from bertlite.jobs.base import EncodeStats

    labels = model.config.id2label or {}
    total, row = EncodeStats(), 0
    while chunk := list(itertools.islice(pairs, CHUNK_PAIRS)):
        for i, (query, text) in enumerate(chunk):
            if not query or not text:
                side = "query" if not query else "text"
                raise ValueError(f"row {row + i} (0-based) has an empty {side}; a pair needs two non-empty texts")
        if args.query is not None:  # one query: tokenized once, not once per text
            encodings = model.tokenize_pairs(args.query, [text for _, text in chunk], first_index=row)
        else:
            encodings = model.encodings(chunk, first_index=row)
        logits = model.encode_tokenized(encodings, args.batch_size, max_tokens=args.max_tokens)
        total.texts, total.tokens = total.texts + len(chunk), total.tokens + model.last_stats.tokens
        scores = np.asarray(logits if args.raw_scores else model.activation(logits), dtype=np.float32)
        if not np.isfinite(scores).all():
            bad = row + int(np.argmin(np.isfinite(scores).all(axis=-1)))
            raise ValueError(f"row {bad} (0-based) gave a NaN or Inf score (non-finite weights, or a float16 overflow)")
        for values in scores.reshape(len(chunk), -1).tolist():
            if len(values) == 1:
                yield {"id": row, "score": values[0]}
            else:
                best = int(np.argmax(values))
                yield {"id": row, "scores": values, "label": labels.get(best, str(best))}
            row += 1
    model.last_stats = total


def _key(record: dict) -> float:
    return record["score"] if "score" in record else max(record["scores"])


def _chunks(rows: Iterator[dict]) -> Iterator[list[dict]]:
    """Rows in lists of CHUNK_PAIRS (each keeps its own id: the writer's count gives way to it)."""
    while chunk := list(itertools.islice(rows, CHUNK_PAIRS)):
        yield chunk
