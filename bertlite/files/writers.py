"""Vectors out: npy, jsonl, parquet, written atomically.

Output goes to a temporary file beside the target and is renamed into place only
when complete, so an interrupted or failed run never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from bertlite.errors import InputError
from bertlite.files import partial
from bertlite.utils.files import result_mode

OUTPUT_FORMATS = ("npy", "jsonl", "parquet")


def output_format(path: str) -> str:
    """Decide an output's format from its suffix.

    Args:
        path: the output file.

    Returns:
        One of OUTPUT_FORMATS (npy, jsonl, parquet).

    Raises:
        InputError: another suffix.
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in OUTPUT_FORMATS:
        raise InputError(f"{path}: output must end in {', '.join('.' + f for f in OUTPUT_FORMATS)}")
    return suffix


def require_pyarrow() -> Any:
    """Import pyarrow with parquet support.

    Returns:
        The pyarrow module.

    Raises:
        InputError: pyarrow (or its parquet module) is not installed, with the install hint.
    """
    try:
        import pyarrow
        import pyarrow.parquet  # pyarrow can be built without parquet support
    except ImportError as e:
        raise InputError("writing .parquet needs pyarrow: pip install pyarrow (or 'bertlite[parquet]')") from e
    return pyarrow


class VectorWriter:
    """Writes rows in order to a temp file beside `path`; renames it into place on close().

    Used as a context manager: leaving the block with an exception deletes the
    temp file, so the target is either complete or untouched. Writes are ordinary
    buffered writes, so a full disk is an OSError (ENOSPC), never a crash.

    The temp file is named after its owner (bertlite.files.partial): after a run that was killed,
    the next run that completes the same output removes what it left; with resume=True a run
    continues from it instead, and keeps its own partial output when it fails.
    """

    def __init__(
        self,
        path: str,
        rows: int | None,
        dimension: int | None,
        *,
        overwrite: bool = True,
        job: dict[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        """Check the target and open the temp file.

        Args:
            path: the output file; its suffix picks the format (OUTPUT_FORMATS).
            rows: how many rows will be written; None: a count not known in advance (stdin); .npy
                reserves its header and fills in the row count at the end.
            dimension: the vectors' length; None: rows that are not one vector each (sparse or per-token
                vectors, scores), written with write_records, to .jsonl only.
            overwrite: an existing target is replaced and keeps its permission bits; False refuses
                to replace it.
            job: the settings that make the vectors (JSON values), kept in the partial output's
                journal: a resumed run must have the same.
            resume: continue from the partial output a run that is gone left for this target (the one
                with the most rows; `written` and `resumed_digest` then say how far it got), and keep
                this run's partial output if it fails. npy and jsonl only.

        Raises:
            InputError: a path check_output_path refuses, parquet without pyarrow, resume with parquet,
                or a partial output made with another job or damaged.
        """
        self.path = Path(path)
        self.format = output_format(path)
        self.rows, self.dimension, self.written = rows, dimension, 0
        self.overwrite = overwrite
        self.job = {**(job or {}), "format": self.format, "dimension": dimension}
        self.resume, self.resumed_digest = resume, partial.InputDigest().hexdigest()
        check_output_path(path, overwrite=overwrite)
        if dimension is None and self.format != "jsonl":
            raise InputError(f"{path}: this job's rows are not vectors of one length; write them to a .jsonl file")
        if resume and self.format == "parquet":
            raise InputError(
                f"{path}: a .parquet output cannot be resumed (it is unreadable until finished); use .npy or .jsonl"
            )
        pyarrow = require_pyarrow() if self.format == "parquet" else None
        self.tmp: Path | None = None
        try:
            with _signals_deferred():
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=partial.temp_prefix(self.path), suffix=".tmp")
                self.tmp = Path(tmp)
            os.close(fd)
            found = partial.latest_partial(self.path) if resume else None
            if found is not None:
                self._check(found)
                self._adopt(found)
            self._open(pyarrow, found)
        except BaseException:
            self.abort(keep=False)  # __exit__ never runs for a constructor that fails
            raise

    def _check(self, found: partial.Partial) -> None:
        """Refuse a partial output made by another job, or whose size its journal does not explain."""
        for key in sorted(set(self.job) | set(found.job)):
            old, new = found.job.get(key), self.job.get(key)
            if old != new:
                raise InputError(
                    f"cannot resume from {found.data}: it was made with {key}={old!r}, this run has {key}={new!r}; "
                    "run without --resume to start again"
                )
        header = len(self._npy_header(0)) if self.format == "npy" else 0
        if self.format == "npy" and found.size != header + found.rows * self.dimension * 4:
            raise InputError(f"cannot resume from {found.data}: its journal does not match its size")

    def _adopt(self, found: partial.Partial) -> None:
        """Take the partial output over as this run's temp file (a rename: two runs cannot both get it)."""
        try:
            os.replace(found.data, self.tmp)
        except FileNotFoundError as e:
            raise InputError(f"cannot resume from {found.data}: another run took it over meanwhile") from e
        os.replace(found.journal, partial.journal_path(self.tmp))
        self.written, self.resumed_digest = found.rows, found.input_digest

    def _open(self, pyarrow: Any, found: partial.Partial | None) -> None:
        if self.format == "npy":
            self._header_size = len(self._npy_header(0))
            if found is None:
                self._file = open(self.tmp, "wb")  # closed in close() or abort()
                self._file.write(self._npy_header(0))
                return
            self._file = open(self.tmp, "r+b")  # closed in close() or abort()
            self._file.truncate(found.size)  # rows written after the journal's last entry are incomplete
            self._file.seek(found.size)
        elif self.format == "jsonl":
            if found is not None:
                with open(self.tmp, "r+b") as f:
                    f.truncate(found.size)
            self._file = open(self.tmp, "a", encoding="utf-8")  # closed in close() or abort()
        else:
            schema = pyarrow.schema(
                [
                    ("id", pyarrow.int64()),
                    ("embedding", pyarrow.list_(pyarrow.float32(), self.dimension)),
                ]
            )
            self._parquet = pyarrow.parquet.ParquetWriter(self.tmp, schema)
            self._pyarrow, self._schema = pyarrow, schema

    def _npy_header(self, rows: int) -> bytes:
        header = io.BytesIO()
        shape = (rows, self.dimension)
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
        return header.getvalue()

    def write(self, vectors: np.ndarray) -> None:
        """Write the next len(vectors) rows.

        Args:
            vectors: (n, dimension) float array.

        Raises:
            RuntimeError: more rows than the writer was opened for.
        """
        start, n = self.written, len(vectors)
        if self.rows is not None and start + n > self.rows:
            raise RuntimeError(f"{start + n} rows written to a writer of {self.rows}")
        if self.format == "npy":
            self._file.write(memoryview(np.ascontiguousarray(vectors, dtype="<f4")))
        elif self.format == "jsonl":
            for i, row in enumerate(vectors.tolist(), start=start):
                # allow_nan=False: a bare NaN is not JSON; the CLI refuses such rows before they get here.
                self._file.write(json.dumps({"id": i, "embedding": row}, allow_nan=False) + "\n")
        else:
            pa = self._pyarrow
            flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
            table = pa.Table.from_arrays(
                [
                    pa.array(np.arange(start, start + n, dtype=np.int64)),
                    pa.FixedSizeListArray.from_arrays(flat, self.dimension),
                ],
                schema=self._schema,
            )
            self._parquet.write_table(table)
        self.written += n

    def write_records(self, records: Sequence[dict[str, Any]]) -> None:
        """Write the next len(records) rows as jsonl lines {"id": i, **record} (a writer opened with
        dimension=None).

        Args:
            records: one dict of JSON values per row.
        """
        for i, record in enumerate(records, start=self.written):
            self._file.write(json.dumps({"id": i, **record}, allow_nan=False) + "\n")
        self.written += len(records)

    def save_progress(self, input_digest: str) -> None:
        """Record in the journal that the rows written so far are complete (npy and jsonl; a no-op for
        parquet, which cannot be resumed), so a later resume=True run can continue after them.

        Args:
            input_digest: the partial.InputDigest of the input rows those rows were made from.
        """
        if self.format == "parquet":
            return
        self._file.flush()
        size = os.fstat(self._file.fileno()).st_size
        partial.write_journal(self.tmp, self.written, size, input_digest, self.job)

    def close(self) -> None:
        """Finish the file and rename it into place (the context manager calls it); then remove what
        killed runs left for the same target (partial.remove_stale).

        Raises:
            RuntimeError: fewer or more rows written than the writer was opened for.
            InputError: with overwrite=False, the target appeared meanwhile; nothing is replaced.
        """
        if self.rows is not None and self.written != self.rows:
            raise RuntimeError(f"wrote {self.written} of {self.rows} rows")
        if self.format == "npy":
            header = self._npy_header(self.written)
            # numpy pads the header so the row count can grow to 21 digits in place.
            assert len(header) == self._header_size, (len(header), self._header_size)
            self._file.seek(0)
            self._file.write(header)
        if self.format == "parquet":
            self._parquet.close()
        else:
            self._file.flush()  # a full disk shows here at the latest, before the rename
            self._file.close()
        with open(self.tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(self.tmp, result_mode(self.path))  # mkstemp's 0600 is for the temp file, not the result
        partial.journal_path(self.tmp).unlink(missing_ok=True)
        if self.overwrite:
            os.replace(self.tmp, self.path)
        else:
            try:
                os.link(self.tmp, self.path)  # fails if the target appeared meanwhile, unlike a rename
            except FileExistsError as e:
                raise InputError(f"{self.path} exists (--no-overwrite); nothing was replaced") from e
            self.tmp.unlink()
        self.tmp = None
        with contextlib.suppress(OSError):  # the output is complete: leftovers are only untidy
            partial.remove_stale(self.path)

    def abort(self, keep: bool | None = None) -> None:
        """Drop the temp file; the target is left as it was.

        Args:
            keep: keep the temp file and its journal for a later resume; None: when opened with resume=True.
        """
        keep = self.resume if keep is None else keep
        if self.tmp is not None and not partial.journal_path(self.tmp).exists():
            keep = False  # no row of it is known to be complete: nothing to resume from
        for name in ("_file", "_parquet"):
            handle = self.__dict__.pop(name, None)
            if handle is not None:
                with contextlib.suppress(Exception):  # already failing: the cleanup must go on
                    handle.close()
        if self.tmp is not None and not keep:
            self.tmp.unlink(missing_ok=True)
            partial.journal_path(self.tmp).unlink(missing_ok=True)

    @property
    def kept(self) -> Path | None:
        """After a failure: the partial output kept for --resume, or None."""
        if self.tmp is None or "_file" in self.__dict__ or not partial.journal_path(self.tmp).exists():
            return None
        return self.tmp

    def __enter__(self) -> VectorWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort(keep=False)
            raise


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done (then arrive as usual), so that
    a temp file never exists without its name stored for the cleanup."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def check_output_path(path: str, *, overwrite: bool = True, inputs: Sequence[str] = ()) -> None:
    """Refuse an output path that cannot end well, before any work.

    Args:
        path: the output file.
        overwrite: False also refuses an existing file.
        inputs: the input paths, which the output must not be (also through a link).

    Raises:
        InputError: an unknown suffix, a folder, a missing or unwritable parent folder, one of the
            inputs, or an existing file with overwrite=False.
    """
    if path.endswith(("/", os.sep)):  # Path() would drop the slash and write a file of that name
        raise InputError(f"{path} ends in a slash, which names a folder; -o takes a file: drop the slash")
    output_format(path)
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{path} is a folder; -o takes a file ending in {', '.join('.' + f for f in OUTPUT_FORMATS)}")
    if not target.parent.is_dir():
        raise InputError(f"output folder {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputError(f"output folder {target.parent} is not writable")
    for source in inputs:
        if source != "-" and target.exists() and os.path.exists(source) and os.path.samefile(source, target):
            raise InputError(f"{path} is the input {source}; writing it would destroy the input: choose another -o")
    if not overwrite and (target.exists() or target.is_symlink()):
        raise InputError(f"{path} exists and --no-overwrite was given; remove it or choose another -o")
