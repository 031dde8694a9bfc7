"""Writing a command's output file: the temp file renamed into place, --resume, NaN rows, SIGTERM.

Shared by `bertlite embed`'s embedding path (embed.py) and its other tasks (embed_tasks.py); SIGTERM's
handling (exit_on_sigterm) by every command that writes a file (embed, rerank).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertlite.files.partial import InputDigest
    from bertlite.files.writers import VectorWriter


def write_output(
    args: argparse.Namespace,
    fail: Callable[[str], int],
    dimension: int | None,
    job: dict[str, object],
    fill: Callable[[VectorWriter], None],
    made: str,
) -> tuple[int | None, int]:
    """Write args.output through a VectorWriter that `fill` writes the rows to; renamed into place when done.

    Args:
        args, fail: the command's arguments and its usage-error reporter.
        dimension: the VectorWriter's (None: jsonl records).
        job: the settings a resumed run must match (JSON values, kept in the journal).
        fill: writes every row to the writer (resuming after writer.written); raises NonFinite for a NaN row.
        made: what a row gives, for the NaN message ("a vector").

    Returns:
        (None, rows resumed after) when the output is complete; (exit status, 0) after a failure,
        reported on stderr.
    """
    import errno

    from bertlite.files.writers import VectorWriter

    writer: VectorWriter | None = None
    try:
        with VectorWriter(
            args.output, None, dimension, overwrite=args.overwrite, job=job, resume=args.resume
        ) as writer:
            resumed = writer.written
            fill(writer)
            Terminated.check()  # the last moment before the rename
    except (KeyboardInterrupt, Terminated):
        say_kept(writer)
        raise
    except NonFinite as e:
        print(
            f"bertlite embed: error: {args.input}: row {e.row} (0-based) gave {made} with NaN or Inf "
            f"(non-finite model weights, or an overflow in --dtype float16); no output written{kept_note(writer)}",
            file=sys.stderr,
        )
        return 1, 0
    except ValueError as e:  # bad input rows, --on-long error, a partial output --resume cannot continue
        return fail(f"{e}{kept_note(writer)}"), 0
    except OSError as e:
        code = f" ({errno.errorcode[e.errno]})" if e.errno in errno.errorcode else ""
        print(
            f"bertlite embed: error: writing {args.output} failed: {e.strerror or e}{code}; no output written"
            f"{kept_note(writer)}",
            file=sys.stderr,
        )
        return 1, 0
    return None, resumed


def resume_rows(
    args: argparse.Namespace, rows: Iterator[str], writer: VectorWriter
) -> tuple[InputDigest, Iterator[str]]:
    """Skip the rows the writer resumes after, checked to be those its kept rows were made from.

    Returns:
        (digest, rest): the running digest of the input rows (the skipped ones in it), and the rows
        still to do, hashed into it as they are taken.

    Raises:
        ValueError: the first rows differ from those of the kept output.
    """
    import itertools

    from bertlite.files.partial import InputDigest

    digest, resumed = InputDigest(), writer.written
    if resumed:
        for text in itertools.islice(rows, resumed):
            digest.add(text)
        if digest.rows != resumed or digest.hexdigest() != writer.resumed_digest:
            raise ValueError(
                f"--resume: the first {resumed} rows of {args.input} are not those the kept rows were made "
                "from; run without --resume to start again"
            )
        print(f"bertlite embed: resuming after the first {resumed} rows, kept by an earlier run", file=sys.stderr)
    return digest, digest.through(rows)


def input_job(args: argparse.Namespace) -> dict[str, object]:
    """The settings of a run's input that its rows depend on (JSON values): a resumed run must have the
    same (with the settings of what makes the rows, which each command adds)."""
    from bertlite.files.readers import input_format

    return {
        "model": os.path.abspath(args.model) if os.path.isdir(args.model) else args.model,
        "input": os.path.abspath(args.input) if args.input != "-" else "-",
        "input_format": input_format(args.input, args.input_format),
        "field": args.field,
        "errors": args.errors,
        "on_long": args.on_long,
    }


def kept_note(writer: VectorWriter | None) -> str:
    """What a failed run says of the rows it kept for --resume ("" when none)."""
    if writer is None or writer.kept is None:
        return ""
    return f"; the {writer.written} rows made so far are kept for a later --resume (in {writer.kept})"


def say_kept(writer: VectorWriter | None) -> None:
    """Print kept_note's news on its own line (an interrupted run, whose exit message follows)."""
    if writer is not None and writer.kept is not None:
        print(f"bertlite embed: {kept_note(writer).removeprefix('; the ')}", file=sys.stderr)


class NonFinite(Exception):
    """A row whose result holds NaN or Inf (`row`: its 0-based number in the input)."""

    def __init__(self, row: int) -> None:
        self.row = row


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so the temp file is removed as for Ctrl-C.

    `seen` stays set after the signal: Python swallows an exception that a handler raises
    inside a finalizer (__del__, a weakref callback), so the embed loop checks it too.
    """

    seen = False

    @classmethod
    def check(cls) -> None:
        if cls.seen:
            raise cls


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (in the main thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        Terminated.seen = True
        raise Terminated

    Terminated.seen = False
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_on_sigterm(command: str, run: Callable[[], int]) -> int:
    """run() with SIGTERM raising Terminated inside it, so the output's temp file goes as for Ctrl-C and
    an earlier output stays as it was.

    Args:
        command: the command's name, for the message ("rerank").
        run: the command's work; returns its exit status.

    Returns:
        run()'s exit status; after SIGTERM, 143 (128 + SIGTERM, as a shell reports it) once
        "bertlite COMMAND: terminated (SIGTERM); no output written" is on stderr.
    """
    try:
        with sigterm_raises():
            return run()
    except Terminated:
        print(f"bertlite {command}: terminated (SIGTERM); no output written", file=sys.stderr)
        return 128 + signal.SIGTERM


def for_cli(error: BaseException) -> str:
    """A load error in one line, without advice that only the Python API can follow (strict=, allow_nonfinite=)."""
    from bertlite.errors import one_line

    return one_line(
        error,
        strict="(check that config.json is the config of these weights)",
        nonfinite="its vectors would not be finite: use a checkpoint with finite weights",
    )
