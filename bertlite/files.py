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
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

INPUT_FORMATS = ("txt", "jsonl", "csv", "tsv")
OUTPUT_FORMATS = ("npy", "jsonl", "parquet")


class InputError(ValueError):
    """The input cannot be read as asked: file, format, encoding, or field."""


def input_format(path: str, given: str | None) -> str:
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
    """The inputs `-i` values name, in order, each once: a pattern with * ? or [
    that is not itself an existing path becomes its matches (sorted; `**` recurses);
    anything else (a path, - for stdin, a URI) is kept as given for the reader to judge."""
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
    """All texts of the input, one per row, in order. Row i of txt is line i (empty lines too)."""
    fmt = input_format(path, fmt)
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    return parse_texts(data, path, fmt, field, errors)


def parse_texts(data: bytes, path: str, fmt: str, field: str = "text", errors: str = "strict") -> list[str]:
    """read_texts() for bytes already read: the one definition of a row, which
    `bertlite embed --engine ray` (bertlite.distributed) applies to each file too."""
    lines = _decode_lines(data, path, errors)
    if fmt == "txt":
        return lines
    if fmt == "jsonl":
        return _jsonl_field(lines, path, field)
    return _csv_column(lines, path, field, delimiter="," if fmt == "csv" else "\t")


def _decode_lines(data: bytes, path: str, errors: str) -> list[str]:
    # A UTF-8 byte order mark (Excel's "CSV UTF-8") would otherwise glue itself to the first field or JSON line.
    raw = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()  # the newline that ends the last line starts no new one
    lines = []
    for number, line in enumerate(raw, start=1):
        try:
            text = line.decode("utf-8", errors=errors)
        except UnicodeDecodeError as e:
            raise InputError(
                f"{path}: line {number} is not valid UTF-8 (at byte offset {e.start} of the line: "
                f"{line[e.start : e.start + 1]!r}); fix the file or replace bad bytes with U+FFFD "
                "(CLI --errors replace, Python errors='replace')"
            ) from e
        lines.append(text.removesuffix("\r"))
    return lines


def _jsonl_field(lines: list[str], path: str, field: str) -> list[str]:
    texts = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: line {number} is not a JSON object ({e.msg})") from e
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise InputError(f"{path}: line {number} has no string field {field!r} (choose one with --field)")
        texts.append(record[field])
    return texts


def _csv_column(lines: list[str], path: str, field: str, delimiter: str) -> list[str]:
    reader = csv.DictReader(io.StringIO("\n".join(lines)), delimiter=delimiter)
    if reader.fieldnames is None or field not in reader.fieldnames:
        raise InputError(f"{path}: no column {field!r} (columns: {', '.join(reader.fieldnames or [])}; use --field)")
    return [row[field] or "" for row in reader]


def output_format(path: str) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in OUTPUT_FORMATS:
        raise InputError(f"{path}: output must end in {', '.join('.' + f for f in OUTPUT_FORMATS)}")
    return suffix


def require_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        raise InputError("writing .parquet needs pyarrow: pip install pyarrow (or 'bertlite[parquet]')") from e
    return pyarrow


class VectorWriter:
    """Writes rows in order to a temp file beside `path`; renames it into place on close().

    Used as a context manager: leaving the block with an exception deletes the
    temp file, so the target is either complete or untouched.
    """

    def __init__(self, path: str, rows: int, dimension: int) -> None:
        self.path = Path(path)
        self.format = output_format(path)
        self.rows, self.dimension, self.written = rows, dimension, 0
        folder = self.path.parent
        if not folder.is_dir():
            raise InputError(f"output folder {folder} does not exist")
        pyarrow = require_pyarrow() if self.format == "parquet" else None
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.", suffix=".tmp")
        os.close(fd)
        self.tmp = Path(tmp)
        try:
            self._open(pyarrow)
        except BaseException:
            self.abort()  # __exit__ never runs for a constructor that fails
            raise

    def _open(self, pyarrow: Any) -> None:
        dimension = self.dimension
        if self.format == "npy":
            self._array = np.lib.format.open_memmap(self.tmp, mode="w+", dtype=np.float32, shape=(self.rows, dimension))
        elif self.format == "jsonl":
            self._file = open(self.tmp, "w", encoding="utf-8")  # noqa: SIM115 (closed in close/abort)
        else:
            schema = pyarrow.schema(
                [
                    ("id", pyarrow.int64()),
                    ("embedding", pyarrow.list_(pyarrow.float32(), dimension)),
                ]
            )
            self._parquet = pyarrow.parquet.ParquetWriter(self.tmp, schema)
            self._pyarrow, self._schema = pyarrow, schema

    def write(self, vectors: np.ndarray) -> None:
        """The next len(vectors) rows."""
        start, n = self.written, len(vectors)
        if self.format == "npy":
            self._array[start : start + n] = vectors
        elif self.format == "jsonl":
            for i, row in enumerate(vectors.tolist(), start=start):
                self._file.write(json.dumps({"id": i, "embedding": row}) + "\n")
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
        if self.written != self.rows:
            raise RuntimeError(f"wrote {self.written} of {self.rows} rows")
        if self.format == "npy":
            self._array.flush()
            del self._array
        elif self.format == "jsonl":
            self._file.close()
        else:
            self._parquet.close()
        with open(self.tmp, "rb+") as f:
            os.fsync(f.fileno())  # a full disk shows here, before the rename, not after
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp's 0600 is for the temp file, not the result
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        """Drop the temp file; the target is left as it was."""
        for name in ("_file", "_parquet"):
            handle = self.__dict__.pop(name, None)
            if handle is not None:
                with contextlib.suppress(Exception):  # already failing: the cleanup must go on
                    handle.close()
        self.__dict__.pop("_array", None)
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
