"""bertlite.files.readers and .writers: rows read one at a time, the vector writer, and the output path checks."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import bertlite.files.readers
from bertlite.errors import InputError
from bertlite.files import partial as partial_module
from bertlite.files.partial import InputDigest
from bertlite.files.readers import iter_texts, parse_texts, read_texts
from bertlite.files.writers import VectorWriter, check_output_path
from tests.helpers import ROOT

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
        # Line ends as Python's universal newlines, csv and pandas read them: a lone \r ends a line too.
        ("txt", b"a\rb\r\rc\r\nd\ne\r", ["a", "b", "", "c", "d", "e"]),
        ("jsonl", b'{"text": "x"}\r{"text": "y"}\r', ["x", "y"]),
        ("csv", b'text,n\rone,1\r"two\rlines",2\rlast,3\r', ["one", "two\rlines", "last"]),
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


@pytest.mark.parametrize("end", [b"", b"\n", b"\r\n"])
def test_a_long_line_is_held_once_while_it_is_read(end: bytes, tmp_path: Path) -> None:
    # The reader must not keep the line's bytes (or its pieces) alive while the caller holds its text.
    import tracemalloc

    size = 8 << 20
    path = tmp_path / "long.txt"
    path.write_bytes(b"word " * (size // 5) + (end + b"next\n" if end else b""))
    rows = iter_texts(str(path))
    tracemalloc.start()
    try:
        text = next(rows)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(text) == size // 5 * 5
    assert held < 1.25 * size, f"{held / size:.2f}x the line held"
    assert list(rows) == (["next"] if end else [])


def test_carriage_returns_end_lines_and_rows_are_numbered_by_them(tmp_path: Path) -> None:
    # Before: a lone \r was no line end: a CR-only txt file was one row, and in csv an error.
    path = tmp_path / "in.csv"
    path.write_bytes(b"text\nfine\nbad\rfield\nmore\n")
    assert read_texts(str(path)) == ["fine", "bad", "field", "more"]
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\rtwo\rbad \xff\rfour\r")
    with pytest.raises(InputError, match=r"in\.txt: line 3 is not valid UTF-8"):
        read_texts(str(path))


@pytest.mark.parametrize("block", [1, 2, 3, 5])
def test_line_ends_cut_by_the_read_block_give_the_same_lines(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lines are read READ_BLOCK bytes at most at a time (a CR-only file has no \n to stop at): a \r\n cut
    # between two blocks is still one line end.
    data = b'text\r\n"a\r\nb"\r\rc\n\r\n\rlast'
    lines = ["text", '"a', 'b"', "", "c", "", "", "last"]
    rows = ["a\r\nb", "c", "last"]  # csv skips blank lines; a quoted field keeps its line ends
    monkeypatch.setattr(bertlite.files.readers, "READ_BLOCK", block)
    assert parse_texts(data, "in.txt", "txt") == lines
    assert parse_texts(data, "in.csv", "csv") == rows


@pytest.mark.parametrize("field", ["text", "body"])
def test_a_column_named_twice_is_refused_by_name(field: str, tmp_path: Path) -> None:
    # Before: csv.DictReader kept the last column of the two, silently.
    path = tmp_path / "in.csv"
    path.write_text(f"id,{field},{field}\n1,first,second\n", encoding="utf-8")
    message = rf"in\.csv: the header names column '{field}' 2 times \(columns 2, 3\); rename all but one"
    with pytest.raises(InputError, match=message):
        read_texts(str(path), field=field)
    path.write_text("text,id,id\nfirst,1,2\n", encoding="utf-8")
    assert read_texts(str(path)) == ["first"]  # a duplicate of another column is no matter


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


def test_output_with_a_trailing_slash_is_refused(tmp_path: Path) -> None:
    # Before: Path() dropped the slash and x.npy was written as a file.
    with pytest.raises(InputError, match=r"x\.npy/ ends in a slash, which names a folder; -o takes a file"):
        check_output_path(f"{tmp_path / 'x.npy'}/")
    assert list(tmp_path.iterdir()) == []


# A writer that dies by SIGKILL: 2 rows saved in its journal, a third written after it; prints its pid.
_KILLED_WRITER = """
import os, signal, sys
import numpy as np
from bertlite.files.writers import VectorWriter
from bertlite.files.partial import InputDigest
writer = VectorWriter(sys.argv[1], None, 3, job={"model": "m"})
digest = InputDigest()
for row in range(3):
    digest.add(f"text {row}")
    writer.write(np.full((1, 3), row, dtype=np.float32))
    if row < 2:
        writer.save_progress(digest.hexdigest())
writer._file.flush()
print(os.getpid(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_writer(out: Path) -> int:
    """Run _KILLED_WRITER on `out` in a subprocess that SIGKILL ends; return its (dead) pid."""
    result = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    return int(result.stdout)


@pytest.mark.slow  # a subprocess killed by SIGKILL
@pytest.mark.parametrize("fmt", ["npy", "jsonl"])
def test_resume_continues_after_the_saved_rows_of_a_killed_writer(fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"out.{fmt}"
    killed_writer(out)
    assert len(list(tmp_path.glob(f".out.{fmt}.*.tmp"))) == 2  # its temp file and journal, left behind
    digest = InputDigest()
    for row in range(2):
        digest.add(f"text {row}")
    with VectorWriter(str(out), None, 3, job={"model": "m"}, resume=True) as writer:
        assert writer.written == 2 and writer.resumed_digest == digest.hexdigest()  # row 2 was never saved
        writer.write(np.full((2, 3), 7, dtype=np.float32))
    expected = np.array([[0] * 3, [1] * 3, [7] * 3, [7] * 3], dtype=np.float32)
    if fmt == "npy":
        np.testing.assert_array_equal(np.load(out), expected)
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["id"] for r in rows] == [0, 1, 2, 3] and np.array([r["embedding"] for r in rows]).tolist() == (
            expected.tolist()
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


@pytest.mark.slow  # a subprocess killed by SIGKILL
def test_resume_refuses_a_partial_output_of_another_job_and_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "out.npy"
    killed_writer(out)
    left = sorted(tmp_path.iterdir())
    with pytest.raises(InputError, match=r"cannot resume from .*: it was made with model='m', this run has model='n'"):
        VectorWriter(str(out), None, 3, job={"model": "n"}, resume=True)
    with pytest.raises(InputError, match=r"a \.parquet output cannot be resumed"):
        VectorWriter(str(tmp_path / "out.parquet"), None, 3, resume=True)
    assert sorted(tmp_path.iterdir()) == left


@pytest.mark.slow  # a subprocess killed by SIGKILL
def test_a_completed_run_removes_what_killed_runs_of_its_output_left(tmp_path: Path) -> None:
    # Before: a SIGKILLed run's .out.npy.XXXX.tmp stayed beside the output forever.
    out = tmp_path / "out.npy"
    killed_writer(out)
    host = partial_module._host()
    other_host = killed_writer(tmp_path / "other.npy")
    other = sorted(p.name for p in tmp_path.glob(".other.npy.*"))  # another output's: not this run's to remove
    kept = [
        f".out.npy.{host}.{os.getppid()}.abcdefgh.tmp",  # a live process's
        f".out.npy.other-host.{other_host}.abcdefgh.tmp",  # another host's
        ".out.npy.abcdefgh.tmp",  # not of this naming
        ".other.npy.unrelated.tmp",
    ]
    for name in kept:
        (tmp_path / name).write_bytes(b"someone's")
    with VectorWriter(str(out), None, 3) as writer:
        writer.write(np.ones((1, 3), dtype=np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, *other, "out.npy"])
