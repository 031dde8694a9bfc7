"""The one place a `bertlite` command loads its job (embed, its other tasks, rerank, serve): its flags mapped
to the job class's from_pretrained, and the compiled kernels built first where they repay.

Torch-free at import, as the parsers are: the job classes are imported when a job loads.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

# --task names of `bertlite embed` that are not a kind: the kind whose job runs them.
_TASK_KINDS = {"token-embeddings": "embedding"}
# The kinds whose vectors --truncate-dim can cut (the job classes that take truncate_dim).
_TRUNCATABLE = ("embedding", "multi-vector")


def load_job(args: argparse.Namespace, kind: str | None = None) -> Any:
    """The job a command's arguments name, loaded once from args.model.

    Maps the flags the commands share (--dtype, int8 included, --device, --pack-weights, --max-length,
    --truncate-dim, and embed's --pooling and --normalize) to from_pretrained's keywords; a flag a command does
    not have, or did not get, leaves the job's default. The job readies its own kernels, as in Python
    (bertlite.jobs.prepare.ready), so a command runs what a script runs. Except in serve, a SlowDtypeWarning or
    Int8PrecisionWarning is one `bertlite COMMAND: warning: ...` line. Once loaded, precision_note's line, if
    any, goes to stderr as `bertlite COMMAND: ...`.

    Args:
        args: the parsed arguments of `bertlite embed`, `rerank` or `serve` (args.command names it).
        kind: the kind to load (a --task name of embed: "token-embeddings" runs on an Embedder);
            None: args.task, where "auto" is detected from the checkpoint's files.

    Returns:
        The loaded job: an Embedder, CrossEncoder, SparseEncoder, MultiVectorEncoder or M3Encoder.

    Raises:
        ValueError: --truncate-dim for a kind whose outputs cannot be cut, or what detect_kind or the
            job's from_pretrained raises.
        OSError: what reading the checkpoint raises.
    """
    from bertlite.jobs import kinds

    kind = kind or args.task
    kind = kinds.detect_kind(args.model) if kind == "auto" else _TASK_KINDS.get(kind, kind)
    if kind in ("sparse", "multi-vector") and kinds.detect_kind(args.model) == "m3":
        kind = "m3"  # BGE-M3's lexical weights and ColBERT vectors come from its own heads
    options = job_options(args, kind)
    if args.command == "serve":  # loaded in the worker thread: catching warnings there would catch other threads'
        job = kinds.load_job(kind, args.model, **options)
    else:
        with one_line_dtype_warnings(f"bertlite {args.command}"):
            job = kinds.load_job(kind, args.model, **options)
    if note := precision_note(args, job):
        print(f"bertlite {args.command}: {note}", file=sys.stderr, flush=True)
    return job


def precision_note(args: argparse.Namespace, job: Any) -> str | None:
    """What a command says at load about the precision its job runs: with --dtype auto, the mode chosen and
    why; in float32 where --dtype auto may run faster here, that it runs the reference's numbers and what auto
    may run (not with --quiet); else None."""
    if args.dtype == "auto":
        return f"--dtype auto runs {job.precision_reason}"  # it names the precision first
    if getattr(args, "quiet", False):
        return None
    if job.precision == "float32" and (faster := auto_precision(job)) != "float32":
        return f"running float32 (the reference's numbers); --dtype auto may run {faster} here"
    return None


def auto_precision(job: Any) -> str:
    """The dtype --dtype auto would try for the job's model on its device, by name: on the CPU this CPU's
    verdict (bertlite.utils.auto_dtype; the job's bar may still keep float32), on CUDA the GPU's native half
    precision. float32 where BERTLITE_AUTO_DTYPE is misspelt: a load with --dtype auto says so."""
    from bertlite.utils.capabilities import accelerator_dtype, detect

    if job.device.type != "cpu":
        return str(accelerator_dtype(job.device)).removeprefix("torch.")
    from bertlite.utils.auto_dtype import auto_dtype

    try:
        return auto_dtype(detect()).dtype
    except ValueError:
        return "float32"


def job_options(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """from_pretrained's keywords from the command's flags, for a job of `kind`.

    Raises:
        ValueError: --truncate-dim for a kind not in _TRUNCATABLE.
    """
    options: dict[str, Any] = {"device": args.device, "dtype": args.dtype, "pack_weights": args.pack_weights}
    for name in ("max_length", "truncate_dim", "pooling", "normalize"):
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    if "truncate_dim" in options and kind not in _TRUNCATABLE:
        raise ValueError(f"--truncate-dim: the model is a {kind} model, whose outputs cannot be cut")
    return options


@contextlib.contextmanager
def one_line_dtype_warnings(command: str) -> Iterator[None]:
    """Each SlowDtypeWarning or Int8PrecisionWarning as one `COMMAND: warning: ...` line on stderr;
    other warnings as usual."""
    import warnings

    from bertlite.errors import Int8PrecisionWarning, SlowDtypeWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        yield
    for w in caught:
        if issubclass(w.category, (SlowDtypeWarning, Int8PrecisionWarning)):
            print(f"{command}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
