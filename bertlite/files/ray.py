"""`bertlite embed --engine ray`: embed many files on Ray Data, one Embedder per actor.

Pipeline: one item per (file, part) -> a task reads the file, parses it with
bertlite.files.readers.parse_texts (the function the single-process `bertlite embed`
uses), numbers its rows and keeps its part's slice -> map_batches on an actor
pool, each actor holding one Embedder -> write_parquet (columns source, line,
embedding, and text with keep_text).

Why not Ray's readers: they cannot number lines (read_text drops empty lines by
default and splits files into blocks that know nothing of each other's
offsets), and `line` must be what the single-process path calls row i, so the
output joins back to the input. Why parts: Ray hands a block to one replica
whole, so a file that stayed one block would keep one replica busy and the
others idle. Each part parses the whole file and keeps 1/parts of the rows:
parsing is cheap next to the model, but a very large file is read once per part.

Ray is optional (pip install 'bertlite[ray]') and imported only inside the
functions here, so `import bertlite` and the default engine never import it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bertlite.errors import InputError, RayNotInstalledError
from bertlite.files.readers import expand_inputs, input_format, parse_texts

RAY_INSTALL_HINT = "--engine ray needs Ray Data: pip install 'bertlite[ray]' (or 'ray[data]>=2.40')"
# Texts per map_batches call. Each call is one Embedder.encode, which sorts its texts
# by length: large enough that sorting removes most padding, small enough that a
# failed batch is cheap to retry.
DEFAULT_BATCH_SIZE = 1024
# Input bytes per part (about a minute of one one-thread replica's work here), and a
# cap, since every part reads its whole file.
PART_BYTES = 4 << 20
MAX_PARTS_PER_FILE = 64


@dataclass
class EmbedDatasetResult:
    """What embed_dataset wrote."""

    rows: int
    files: list[str]  # the parquet files under output_dir
    seconds: float

    @property
    def rows_per_s(self) -> float:
        """Rows embedded per second of the job."""
        return self.rows / max(self.seconds, 1e-9)


def require_ray() -> Any:
    """Import Ray with Ray Data.

    Returns:
        The ray module.

    Raises:
        RayNotInstalledError: ray[data] is not installed, with the install hint.
    """
    try:
        import ray
        import ray.data  # needs the ray[data] extra, which a plain `import ray` does not check
    except ImportError as e:
        raise RayNotInstalledError(RAY_INSTALL_HINT) from e
    return ray


def _input_files(patterns: str | Sequence[str], fmt: str | None) -> list[str]:
    """Absolute paths of local inputs (URIs as given), checked on the driver so a typo
    fails before Ray starts."""
    paths = []
    for path in expand_inputs(patterns):
        if path == "-":
            raise InputError("--engine ray reads files, not stdin (-)")
        if "://" not in path:
            if os.path.isdir(path):
                raise InputError(f"{path} is a folder; name its files, e.g. '{os.path.join(path, '*.jsonl')}'")
            if not os.path.isfile(path):
                raise InputError(f"cannot read {path}: no such file")
            input_format(path, fmt)  # an unknown extension fails here, not in a Ray task
            path = os.path.abspath(path)
        paths.append(path)
    return list(dict.fromkeys(paths))


def _plan_parts(paths: list[str], num_replicas: int) -> list[dict[str, Any]]:
    """(path, part, parts) items: about PART_BYTES of input per part, and at least one
    part per replica when there are fewer files than replicas."""
    parts = []
    for path in paths:
        size = _file_size(path)
        count = max(-(-size // PART_BYTES), -(-num_replicas // len(paths)))
        count = min(count, MAX_PARTS_PER_FILE)
        parts += [{"path": path, "part": k, "parts": count} for k in range(count)]
    return parts


def _file_size(path: str) -> int:
    if "://" not in path:
        return os.path.getsize(path)
    import pyarrow.fs

    filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
    return filesystem.get_file_info(inner).size or 0


def _read_bytes(path: str) -> bytes:
    if "://" not in path:
        with open(path, "rb") as f:
            return f.read()
    import pyarrow.fs

    filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
    with filesystem.open_input_stream(inner) as f:
        return f.readall()


def _parse_parts(items: Any, fmt: str | None, field: str, errors: str) -> Any:
    """(path, part, parts) items -> one row per text of each part: source, line, text."""
    import pyarrow as pa

    sources, lines, texts = [], [], []
    for item in items.to_pylist():
        path = item["path"]
        rows = parse_texts(_read_bytes(path), path, input_format(path, fmt), field, errors)
        start = len(rows) * item["part"] // item["parts"]
        stop = len(rows) * (item["part"] + 1) // item["parts"]
        sources += [path] * (stop - start)
        lines += range(start, stop)
        texts += rows[start:stop]
    return pa.table(
        {
            "source": pa.array(sources, pa.string()),
            "line": pa.array(lines, pa.int64()),
            "text": pa.array(texts, pa.string()),
        }
    )


class EmbedBatch:
    """The actor's UDF: loads one Embedder in __init__, embeds a batch of rows per call."""

    def __init__(
        self,
        model: str,
        threads: int,
        keep_text: bool,
        embedder_kwargs: dict[str, Any],
        encode_kwargs: dict[str, Any],
    ) -> None:
        """Load the replica's Embedder.

        Args:
            model: a checkpoint folder or hub id.
            threads: torch threads, the CPUs Ray reserves for this actor.
            keep_text: also return the text column.
            embedder_kwargs: Embedder.from_pretrained's keywords.
            encode_kwargs: Embedder.encode's keywords.
        """
        import torch

        from bertlite.jobs.embedder import Embedder

        # Ray reserves `threads` CPUs for this actor; more torch threads than that
        # would fight the other replicas on the node for the same cores.
        torch.set_num_threads(threads)
        self.embedder = Embedder.from_pretrained(model, **embedder_kwargs)
        self.keep_text = keep_text
        self.encode_kwargs = encode_kwargs

    def __call__(self, batch: Any) -> Any:
        """Embed a pyarrow batch of rows (source, line, text).

        Returns:
            A pyarrow table: source, line, embedding (fixed-size list of float32), and text with keep_text.
        """
        import numpy as np
        import pyarrow as pa

        vectors = self.embedder.encode(batch["text"].to_pylist(), show_progress_bar=False, **self.encode_kwargs)
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        columns = {
            "source": batch["source"],
            "line": batch["line"],
            "embedding": pa.FixedSizeListArray.from_arrays(flat, self.embedder.dimension),
        }
        if self.keep_text:
            columns["text"] = batch["text"]
        return pa.table(columns)


def embed_dataset(
    model: str | os.PathLike,
    input_paths: str | Sequence[str],
    output_dir: str | os.PathLike,
    *,
    field: str = "text",
    input_format: str | None = None,
    errors: str = "strict",
    batch_size: int = DEFAULT_BATCH_SIZE,
    num_replicas: int = 2,
    threads_per_replica: int = 1,
    keep_text: bool = False,
    dtype: str | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_length: int | None = None,
    pack_weights: bool = True,
    encode_batch_size: int | None = None,
    max_tokens: int | None = None,
    on_long: str = "truncate",
    ray_address: str | None = None,
    show_progress: bool = True,
) -> EmbedDatasetResult:
    """Embed every row of the input files with Ray actors into parquet files under `output_dir`.

    Output columns: source (the input file's absolute path), line (0-based row of that file as
    bertlite.files.readers.read_texts counts it), embedding (fixed-size list of float32), and text when
    keep_text. Row order across files is not kept; join on (source, line).

    Args:
        model: a checkpoint folder or hub id, loaded by every replica.
        input_paths: files or glob patterns (txt, jsonl, csv, tsv); also URIs Ray reads (s3://...).
            Not stdin.
        output_dir: a local path (on a cluster: a shared filesystem every node sees) that must not
            exist or be empty; it appears only when the job is complete.
        field: the JSON field or CSV/TSV column holding the text.
        input_format: one of INPUT_FORMATS; None: from each file's suffix.
        errors: "strict" or "replace", as in bertlite.files.readers.read_texts.
        batch_size: rows per Ray batch (one Embedder.encode call, retried whole if its replica dies).
        num_replicas: Ray actors, each with its own Embedder.
        threads_per_replica: CPUs Ray reserves per actor, and its torch threads.
        keep_text: also write the text column.
        dtype, pooling, normalize, max_length, pack_weights: Embedder.from_pretrained's.
        encode_batch_size: Embedder.encode's batch_size inside a Ray batch.
        max_tokens: Embedder.encode's max_tokens inside a Ray batch.
        on_long: "truncate" or "error", as in Embedder.encode.
        ray_address: used only when Ray is not running yet: None starts a new local Ray, "auto"
            joins the `ray start` cluster; a Ray started here is shut down at the end. A running Ray
            (ray.is_initialized()) is used as it is.
        show_progress: Ray Data's progress bars.

    Returns:
        EmbedDatasetResult: rows written, the parquet files, seconds taken.

    Raises:
        ValueError: num_replicas, threads_per_replica or batch_size below 1; a bad row under
            on_long="error".
        InputError: missing inputs, stdin, an output_dir that is a file or not empty, or a bad row.
        RayNotInstalledError: ray[data] is not installed.
    """
    if num_replicas < 1 or threads_per_replica < 1 or batch_size < 1:
        raise ValueError(
            f"num_replicas, threads_per_replica and batch_size must be >= 1, "
            f"got {num_replicas}, {threads_per_replica}, {batch_size}"
        )
    paths = _input_files(input_paths, input_format)
    output = os.path.abspath(output_dir)
    _check_output_dir(output)
    ray = require_ray()
    with _ray_running(ray, ray_address), _data_context(ray, show_progress):
        start = time.perf_counter()
        dataset = _read_parts(ray, paths, num_replicas, input_format, field, errors)
        # Fault tolerance is Ray Data's default for actor pools (max_restarts=-1,
        # max_task_retries=-1): a replica that dies is restarted and its batch is run
        # again; a Python exception in a batch is not retried and fails the job.
        embedded = dataset.map_batches(
            EmbedBatch,
            fn_constructor_args=(
                str(model),
                threads_per_replica,
                keep_text,
                {
                    "dtype": dtype,
                    "pooling": pooling,
                    "normalize": normalize,
                    "max_length": max_length,
                    "pack_weights": pack_weights,
                },
                {"batch_size": encode_batch_size, "max_tokens": max_tokens, "on_long": on_long},
            ),
            batch_size=batch_size,
            batch_format="pyarrow",
            # One batch queued per replica: a replica that is still loading gets work
            # too, instead of the first ready one taking every batch of a small input.
            compute=ray.data.ActorPoolStrategy(size=num_replicas, max_tasks_in_flight_per_actor=1),
            num_cpus=threads_per_replica,
        )
        names, rows = _write_parquet(embedded, output)
    return EmbedDatasetResult(rows, [os.path.join(output, name) for name in names], time.perf_counter() - start)


@contextmanager
def _ray_running(ray: Any, ray_address: str | None) -> Iterator[None]:
    """Run the block on the Ray that runs already, else on one started for it and shut down after it.

    Args:
        ray: the ray module.
        ray_address: embed_dataset's: where a Ray started here connects.
    """
    started = not ray.is_initialized()
    if started:
        # "local" rather than None: a new Ray for this job, never a cluster that
        # RAY_ADDRESS or an earlier `ray start` points at (that takes ray_address="auto").
        ray.init(address=ray_address or "local", include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


@contextmanager
def _data_context(ray: Any, show_progress: bool) -> Iterator[None]:
    """Run the block with Ray Data's context set for embed_dataset, and restore it after.

    Args:
        ray: the ray module.
        show_progress: Ray Data's progress bars.
    """
    context = ray.data.DataContext.get_current()
    saved = context.enable_progress_bars, getattr(context, "raise_original_map_exception", False)
    try:
        context.enable_progress_bars = show_progress
        # A UDF's own exception (a bad input line), not Ray Data's UserCodeException
        # that keeps only its text: _user_error turns it into the CLI's one-line exit 2.
        context.raise_original_map_exception = True
        yield
    finally:
        context.enable_progress_bars, context.raise_original_map_exception = saved


def _read_parts(ray: Any, paths: list[str], num_replicas: int, fmt: str | None, field: str, errors: str) -> Any:
    """The dataset of the input rows (source, line, text), one block per part of a file (_plan_parts).

    Args:
        ray: the ray module.
        paths: the input files.
        num_replicas: the replicas the parts are planned for.
        fmt, field, errors: embed_dataset's input_format, field and errors.

    Returns:
        The Ray dataset, not yet run.
    """
    # Reading and writing are scheduled without a CPU reservation: the replicas
    # may hold every CPU (2 replicas on 2 cores), and a read or write task waiting
    # for a free CPU would wait forever. They are light next to the model.
    parts = _plan_parts(paths, num_replicas)
    return ray.data.from_items(parts, override_num_blocks=len(parts)).map_batches(
        _parse_parts, fn_args=(fmt, field, errors), batch_size=1, batch_format="pyarrow", num_cpus=0
    )


def _write_parquet(embedded: Any, output: str) -> tuple[list[str], int]:
    """Run the dataset into parquet files in a new folder `output`, which appears only when all are written.

    Args:
        embedded: the dataset of the embedded rows.
        output: the output folder: absent or empty.

    Returns:
        (the parquet files' names in `output`, the rows written).

    Raises:
        InputError, ValueError: a bad input row (_user_error), out of Ray's wrappers.
    """
    # Written beside the target and renamed into place when complete, as VectorWriter
    # does for one file: a failed job leaves no folder of partial results.
    target = tempfile.mkdtemp(dir=os.path.dirname(output), prefix=f".{os.path.basename(output)}.", suffix=".tmp")
    try:
        try:
            embedded.write_parquet(target, ray_remote_args={"num_cpus": 0})
        except Exception as e:
            user_error = _user_error(e)
            if user_error is None:
                raise
            raise user_error from e
        names = sorted(name for name in os.listdir(target) if name.endswith(".parquet"))
        rows = _count_rows([os.path.join(target, name) for name in names])
        os.replace(target, output)  # an empty output_dir is replaced too (rename(2) allows it)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return names, rows


def _check_output_dir(output: str) -> None:
    if os.path.isdir(output) and os.listdir(output):
        raise InputError(f"output folder {output} is not empty; name a new or empty folder")
    if os.path.exists(output) and not os.path.isdir(output):
        raise InputError(f"{output} is a file; --engine ray writes a folder of parquet files")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise InputError(f"output folder {parent} does not exist")


def _user_error(error: BaseException) -> Exception | None:
    """The InputError / ValueError a UDF raised (bad line, --on-long error), out of
    Ray's wrappers, so the CLI can print one line and exit 2 as the default engine does."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (InputError, ValueError)) and type(error).__module__.startswith(("bertlite", "builtins")):
            return error
        error = getattr(error, "cause", None) or error.__cause__
    return None


def _count_rows(files: list[str]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
