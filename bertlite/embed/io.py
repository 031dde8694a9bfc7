"""Texts in (txt, jsonl, csv, tsv, stdin) and vectors out (npy, jsonl, parquet).

Output goes to a temporary file beside the target and is renamed into place only
when complete, so an interrupted or failed run never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import json
import os
import re
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from bertlite.errors import InputError
from bertlite.utils.files import result_mode

INPUT_FORMATS = ("txt", "jsonl", "csv", "tsv")
OUTPUT_FORMATS = ("npy", "jsonl", "parquet")


def input_format(path: str, given: str | None) -> str:
    """Decide an input's format.

    Args:
        path: the input file, or "-" for stdin (txt).
        given: the format asked for; None: from the file's suffix.

    Returns:
        One of INPUT_FORMATS.

    Raises:
        InputError: no format given and the suffix names none.
    """
    if given:
        return given
    if path == "-":
        return "txt"
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in INPUT_FORMATS:
        raise InputError(
            f"{path}: cannot tell the input format from the name; pass --input-format {{{','.join(INPUT_FORMATS)}}}"
        )
    return suffix


def expand_inputs(patterns: str | Sequence[str]) -> list[str]:
    """Expand the inputs `-i` values name, in order, each once.

    Args:
        patterns: one or several paths or patterns. A pattern with * ? or [ that is not itself an
            existing path becomes its matches (sorted; `**` recurses); anything else (a path, - for
            stdin, a URI) is kept as given for the reader to judge.

    Returns:
        The paths, duplicates dropped.

    Raises:
        InputError: a pattern that matches nothing.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    paths: list[str] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?[") and "://" not in pattern and not os.path.exists(pattern):
            matches = sorted(glob.glob(pattern, recursive=True))
            if not matches:
                raise InputError(f"{pattern}: no file matches this pattern")
            paths += matches
        else:
            paths.append(pattern)
    return list(dict.fromkeys(paths))


def read_texts(path: str, fmt: str | None = None, field: str = "text", errors: str = "strict") -> list[str]:
    """Read all texts of the input, one per row, in order. Row i of txt is line i (empty lines too).

    Args:
        path: a file, or "-" for stdin (read as txt unless fmt says otherwise).
        fmt: one of INPUT_FORMATS (txt, jsonl, csv, tsv); None: from the file's suffix.
        field: the JSON field or CSV/TSV column that holds the text (default "text").
        errors: "strict" (default): invalid UTF-8, or a lone surrogate in JSON, is an InputError;
            "replace": replaced with U+FFFD.

    Returns:
        The texts.

    Raises:
        InputError: an unreadable file, an unknown format, or a bad row (named by its line).
    """
    return list(iter_texts(path, fmt, field, errors))


def iter_texts(path: str, fmt: str | None = None, field: str = "text", errors: str = "strict") -> Iterator[str]:
    """read_texts() one row at a time, reading the input as it goes.

    Memory does not grow with the input's length, and stdin may be endless.

    Args:
        path, fmt, field, errors: as in read_texts.

    Returns:
        An iterator of the texts.

    Raises:
        InputError: here, an unknown format or a file that cannot be opened; bad rows raise it when
            reached.
    """
    fmt = input_format(path, fmt)
    if path == "-":
        return _rows(sys.stdin.buffer, path, fmt, field, errors)
    try:
        stream = Path(path).open("rb")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    return _closing(stream, _rows(stream, path, fmt, field, errors))


def parse_texts(data: bytes, path: str, fmt: str, field: str = "text", errors: str = "strict") -> list[str]:
    """read_texts() for bytes already read.

    The one definition of a row, which `bertlite embed --engine ray` (bertlite.embed.ray) applies to
    each file too.

    Args:
        data: the file's bytes.
        path: its name, for error messages.
        fmt: one of INPUT_FORMATS.
        field, errors: as in read_texts().

    Returns:
        The texts.

    Raises:
        InputError: a bad row.
    """
    return list(_rows(io.BytesIO(data), path, fmt, field, errors))


def _closing(stream: BinaryIO, rows: Iterator[str]) -> Iterator[str]:
    with stream:
        yield from rows


def _rows(stream: BinaryIO, path: str, fmt: str, field: str, errors: str) -> Iterator[str]:
    lines = _decode_lines(stream, path, errors)
    if fmt == "txt":
        return lines
    if fmt == "jsonl":
        return _jsonl_field(lines, path, field, errors)
    return _csv_column(lines, path, field, delimiter="," if fmt == "csv" else "\t")


def _decode_lines(stream: BinaryIO, path: str, errors: str) -> Iterator[str]:
    number = 0
    try:
        for line in stream:
            number += 1
            if number == 1:
                # A UTF-8 byte order mark (Excel's "CSV UTF-8") would otherwise glue itself
                # to the first field or JSON line.
                line = line.removeprefix(b"\xef\xbb\xbf")
            line = line.removesuffix(b"\n")
            try:
                text = line.decode("utf-8", errors=errors)
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{path}: line {number} is not valid UTF-8 (at byte offset {e.start} of the line: "
                    f"{line[e.start : e.start + 1]!r}); fix the file or replace bad bytes with U+FFFD "
                    "(CLI --errors replace, Python errors='replace')"
                ) from e
            yield text.removesuffix("\r")
    except OSError as e:
        raise InputError(f"cannot read {path} (after line {number}): {e.strerror or e}") from e


# JSON can spell a lone UTF-16 surrogate ("\\ud800"), which no tokenizer accepts
# and no UTF-8 file can hold; a proper pair decodes to one character and never matches.
SURROGATE = re.compile("[\ud800-\udfff]")  # a lone half of a UTF-16 pair: not text, and tokenizers refuses it


def _jsonl_field(lines: Iterator[str], path: str, field: str, errors: str) -> Iterator[str]:
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: line {number} is not a JSON object ({e.msg})") from e
        except RecursionError as e:
            raise InputError(f"{path}: line {number} is nested too deeply to read as JSON") from e
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise InputError(f"{path}: line {number} has no string field {field!r} (choose one with --field)")
        text = record[field]
        surrogate = SURROGATE.search(text)
        if surrogate and errors == "strict":
            raise InputError(
                f"{path}: line {number}: field {field!r} holds a lone surrogate "
                f"(\\u{ord(surrogate.group()):04x}), which is not Unicode text; fix the file or replace it with "
                "U+FFFD (CLI --errors replace, Python errors='replace')"
            )
        yield SURROGATE.sub("\ufffd", text) if surrogate else text


# csv's default limit (128 KiB per field) is far below one long document; rows are
# read one at a time, so a field is bounded by memory as a txt line is. The limit
# is process-wide in the csv module: raised, never lowered.
CSV_FIELD_LIMIT = 1 << 30


def _csv_column(lines: Iterator[str], path: str, field: str, delimiter: str) -> Iterator[str]:
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    number = 0

    def feed() -> Iterator[str]:
        nonlocal number  # the line being parsed when csv fails (its own line_num lags behind)
        for number, line in enumerate(lines, start=1):  # noqa: B007 (read by the handler below)
            yield line + "\n"

    reader = csv.DictReader(feed(), delimiter=delimiter)
    try:
        if reader.fieldnames is None or field not in reader.fieldnames:
            columns = ", ".join(reader.fieldnames or [])
            raise InputError(f"{path}: no column {field!r} (columns: {columns}; use --field)")
        for row in reader:
            if row[field] is None:  # a short row: its text would silently be ""
                kind = "CSV" if delimiter == "," else "TSV"
                raise InputError(f"{path}: line {number} has no {field!r} field (a {kind} row with too few columns)")
            yield row[field]
    except csv.Error as e:
        kind = "CSV" if delimiter == "," else "TSV"
        reason = "a carriage return inside an unquoted field; quote it" if "new-line" in str(e) else str(e)
        raise InputError(f"{path}: line {number} is not valid {kind} ({reason})") from e


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
    """

    def __init__(self, path: str, rows: int | None, dimension: int, *, overwrite: bool = True) -> None:
        """Check the target and open the temp file.

        Args:
            path: the output file; its suffix picks the format (OUTPUT_FORMATS).
            rows: how many rows will be written; None: a count not known in advance (stdin); .npy
                reserves its header and fills in the row count at the end.
            dimension: the vectors' length.
            overwrite: an existing target is replaced and keeps its permission bits; False refuses
                to replace it.

        Raises:
            InputError: a path check_output_path refuses, or parquet without pyarrow.
        """
        self.path = Path(path)
        self.format = output_format(path)
        self.rows, self.dimension, self.written = rows, dimension, 0
        self.overwrite = overwrite
        check_output_path(path, overwrite=overwrite)
        pyarrow = require_pyarrow() if self.format == "parquet" else None
        self.tmp: Path | None = None
        try:
            with _signals_deferred():
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
                self.tmp = Path(tmp)
            os.close(fd)
            self._open(pyarrow)
        except BaseException:
            self.abort()  # __exit__ never runs for a constructor that fails
            raise

    def _open(self, pyarrow: Any) -> None:
        if self.format == "npy":
            self._file = open(self.tmp, "wb")  # closed in close() or abort()
            self._header_size = self._file.write(self._npy_header(0))
        elif self.format == "jsonl":
            self._file = open(self.tmp, "w", encoding="utf-8")  # closed in close() or abort()
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

    def close(self) -> None:
        """Finish the file and rename it into place (the context manager calls it).

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
        if self.overwrite:
            os.replace(self.tmp, self.path)
        else:
            try:
                os.link(self.tmp, self.path)  # fails if the target appeared meanwhile, unlike a rename
            except FileExistsError as e:
                raise InputError(f"{self.path} exists (--no-overwrite); nothing was replaced") from e
            self.tmp.unlink()

    def abort(self) -> None:
        """Drop the temp file; the target is left as it was."""
        for name in ("_file", "_parquet"):
            handle = self.__dict__.pop(name, None)
            if handle is not None:
                with contextlib.suppress(Exception):  # already failing: the cleanup must go on
                    handle.close()
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> VectorWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
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
