"""Texts in: txt, jsonl, csv, tsv and stdin, read one row at a time.

Rows stream from the file (or a bytes payload, for Ray), so a corpus larger than memory
is read as it is embedded; a bad row fails with its file and line.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from bertlite.errors import InputError
from bertlite.utils.text import SURROGATE

INPUT_FORMATS = ("txt", "jsonl", "csv", "tsv")


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

    The one definition of a row, which `bertlite embed --engine ray` (bertlite.files.ray) applies to
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
    if fmt == "txt":
        return _decode_lines(stream, path, errors)
    if fmt == "jsonl":
        return _jsonl_field(_decode_lines(stream, path, errors), path, field, errors)
    lines = _decode_lines(stream, path, errors, keep_ends=True)  # a quoted field keeps the line ends in it
    return _csv_column(lines, path, field, delimiter="," if fmt == "csv" else "\t")


def _decode_lines(stream: BinaryIO, path: str, errors: str, keep_ends: bool = False) -> Iterator[str]:
    number = 0
    try:
        for line in _split_lines(stream):
            number += 1
            if number == 1:
                # A UTF-8 byte order mark (Excel's "CSV UTF-8") would otherwise glue itself
                # to the first field or JSON line.
                line = line.removeprefix(b"\xef\xbb\xbf")
            end = len(line)
            if not keep_ends:
                end -= 2 if line.endswith(b"\r\n") else 1 if line.endswith((b"\n", b"\r")) else 0
            try:
                # Decoded through a view, and the bytes dropped before the text goes out: a long line
                # is held once as text, not also as bytes and as a stripped copy.
                text = str(memoryview(line)[:end], "utf-8", errors)
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{path}: line {number} is not valid UTF-8 (at byte offset {e.start} of the line: "
                    f"{line[e.start : e.start + 1]!r}); fix the file or replace bad bytes with U+FFFD "
                    "(CLI --errors replace, Python errors='replace')"
                ) from e
            del line
            yield text
    except OSError as e:
        raise InputError(f"cannot read {path} (after line {number}): {e.strerror or e}") from e


# Bytes read at most at once: a file without \n (old Mac line ends) is split as it is read too.
READ_BLOCK = 1 << 16
# Splits after each line end: \n, \r\n, or a \r that no \n follows.
AFTER_LINE_END = re.compile(b"(?<=\n)|(?<=\r)(?!\n)")


def _split_lines(stream: BinaryIO) -> Iterator[bytes]:
    """The stream's lines, each with its end: \n, \r\n and a lone \r each end one, as Python's universal
    newlines, csv and pandas read them (UTF-8 never has these bytes inside a character)."""
    parts: list[bytes] = []  # a line begun in earlier blocks; or a line ended by \r that \n may still join
    while block := stream.readline(READ_BLOCK):
        if parts and parts[-1].endswith(b"\r"):
            if block.startswith(b"\n"):  # a \r\n the block limit cut in two
                parts.append(b"\n")
                block = block[1:]
            yield b"".join(parts)
            parts = []
        if not parts and block.endswith(b"\n") and block.find(b"\r", 0, len(block) - 2) == -1:
            yield block  # the common line, without a copy
            continue
        *lines, rest = AFTER_LINE_END.split(block)
        if not rest and lines and lines[-1].endswith(b"\r"):  # the next block may open with its \n
            rest = lines.pop()
        for line in lines:
            # Handed out through a list this frame empties, and the pieces let go first: a long line is
            # held only by the reader, not also here while the reader works on it.
            joined, parts = [b"".join([*parts, line]) if parts else line], []
            yield joined.pop()
        if rest:
            parts.append(rest)
    if parts:
        joined, parts = [b"".join(parts)], []
        yield joined.pop()


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
            yield line

    reader = csv.DictReader(feed(), delimiter=delimiter)
    try:
        if reader.fieldnames is None or field not in reader.fieldnames:
            columns = ", ".join(reader.fieldnames or [])
            raise InputError(f"{path}: no column {field!r} (columns: {columns}; use --field)")
        places = [str(i) for i, name in enumerate(reader.fieldnames, start=1) if name == field]
        if len(places) > 1:  # DictReader would silently keep the last one
            raise InputError(
                f"{path}: the header names column {field!r} {len(places)} times (columns {', '.join(places)}); "
                "rename all but one"
            )
        for row in reader:
            if row[field] is None:  # a short row: its text would silently be ""
                kind = "CSV" if delimiter == "," else "TSV"
                raise InputError(f"{path}: line {number} has no {field!r} field (a {kind} row with too few columns)")
            yield row[field]
    except csv.Error as e:
        kind = "CSV" if delimiter == "," else "TSV"
        raise InputError(f"{path}: line {number} is not valid {kind} ({e})") from e
