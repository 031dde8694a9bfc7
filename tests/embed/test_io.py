"""bertlite.embed.io: rows read one at a time, the vector writer, and the output path checks."""

from __future__ import annotations

import io
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bertlite.embed.io import VectorWriter, check_output_path, iter_texts, parse_texts, read_texts
from bertlite.errors import InputError

# A BOM, CRLF line ends, an empty row, a quoted field over two lines, and no newline at the end.
TABLE = b'\xef\xbb\xbftext,n\r\none,1\r\n,2\r\n"two\nlines, quoted",3\r\nlast,4'


@pytest.mark.parametrize(
    ("fmt", "data", "expected"),
    [
        ("txt", b"\xef\xbb\xbfa\r\n\nb\n", ["a", "", "b"]),
        ("txt", b"no newline at the end", ["no newline at the end"]),
        ("txt", b"", []),
        ("jsonl", b'{"text": "x"}\n{"text": "caf\\u00e9 \\ud83d\\ude00"}', ["x", "caf\u00e9 \U0001f600"]),
        ("csv", TABLE, ["one", "", "two\nlines, quoted", "last"]),
    ],
)
def test_streamed_rows_equal_the_rows_of_the_bytes(fmt: str, data: bytes, expected: list[str], tmp_path: Path) -> None:
    # parse_texts is what the Ray engine numbers its rows by: the file path must give the same rows.
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(data)
    assert parse_texts(data, str(path), fmt) == expected
    assert read_texts(str(path)) == expected
    assert list(iter_texts(str(path))) == expected


def test_stdin_is_read_as_it_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.BytesIO(b"first\nsecond\nthird\n")
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=stream))
    rows = iter_texts("-")
    assert next(rows) == "first"
    assert stream.tell() == len(b"first\n")  # nothing read beyond the row asked for
    assert list(rows) == ["second", "third"]


def test_csv_field_over_128_kib(tmp_path: Path) -> None:
    big = "word " * 60_000  # 300 KB, over the csv module's default field limit of 128 KiB
    path = tmp_path / "in.csv"
    path.write_text(f'text,id\n"{big}",1\nsmall,2\n', encoding="utf-8")
    assert read_texts(str(path)) == [big, "small"]


def test_bad_csv_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"text\nfine\nbad\rfield\nmore\n")
    with pytest.raises(InputError, match=r"in\.csv: line 3 is not valid CSV \(a carriage return inside an unquoted"):
        read_texts(str(path))


@pytest.mark.parametrize(
    "suffix, data", [("csv", "id,text\n1,hello\n2\n3,world\n"), ("tsv", "id\ttext\n1\thello\n2\n")]
)
def test_short_table_row_names_the_line(suffix: str, data: str, tmp_path: Path) -> None:
    # A row without the text column used to become the text "" (a vector of nothing, silently).
    path = tmp_path / f"in.{suffix}"
    path.write_text(data, encoding="utf-8")
    kind = suffix.upper()
    with pytest.raises(InputError, match=rf"in\.{suffix}: line 3 has no 'text' field \(a {kind} row with too few"):
        read_texts(str(path))
    path.write_text(data.replace("\n2\n", "\n2,\n" if suffix == "csv" else "\n2\t\n"), encoding="utf-8")
    assert read_texts(str(path))[1] == ""  # an empty field is an empty text, as before


def test_lone_surrogate_in_jsonl_names_the_line_unless_replaced(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "bad \\ud800 half"}\n', encoding="utf-8")
    message = r"in\.jsonl: line 2: field 'text' holds a lone surrogate \(\\ud800\).*--errors replace"
    with pytest.raises(InputError, match=message):
        read_texts(str(path))
    assert read_texts(str(path), errors="replace") == ["ok", "bad \ufffd half"]


@pytest.mark.parametrize("rows", [None, 7])
def test_npy_writer_fills_in_the_row_count_at_the_end(rows: int | None, tmp_path: Path) -> None:
    vectors = np.arange(7 * 3, dtype=np.float32).reshape(7, 3) / 7
    out = tmp_path / "out.npy"
    with VectorWriter(str(out), rows, 3) as writer:
        for start in (0, 2, 5):
            writer.write(vectors[start : {0: 2, 2: 5, 5: 7}[start]])
    np.testing.assert_array_equal(np.load(out), vectors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]


def test_replaced_output_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    out.chmod(0o600)
    with VectorWriter(str(out), None, 2) as writer:
        writer.write(np.ones((1, 2), dtype=np.float32))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_text() == '{"id": 0, "embedding": [1.0, 1.0]}\n'


def test_no_overwrite_keeps_a_file_that_appears_meanwhile(tmp_path: Path) -> None:
    out = tmp_path / "out.npy"
    with pytest.raises(InputError, match="exists"), VectorWriter(str(out), None, 2, overwrite=False) as writer:
        writer.write(np.ones((1, 2), dtype=np.float32))
        out.write_bytes(b"someone else's")
    assert out.read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]


def test_output_path_checks(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("hello\n")
    (tmp_path / "link.npy").symlink_to(source)
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(InputError, match=r"link\.npy is the input .*in\.txt; writing it would destroy the input"):
        check_output_path(str(tmp_path / "link.npy"), inputs=[str(source)])
    with pytest.raises(InputError, match=r"folder\.npy is a folder; -o takes a file"):
        check_output_path(str(tmp_path / "folder.npy"))
    (tmp_path / "out.npy").write_bytes(b"earlier")
    with pytest.raises(InputError, match=r"out\.npy exists and --no-overwrite was given"):
        check_output_path(str(tmp_path / "out.npy"), overwrite=False)
    check_output_path(str(tmp_path / "new.npy"), overwrite=False, inputs=[str(source), "-"])
    assert source.read_text() == "hello\n"
