"""`bertlite embed` end to end: in process (main(argv) -> exit code), and one real subprocess for SIGINT."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bertlite.cli import main
from bertlite.features import Embedder

REPO = Path(__file__).resolve().parent.parent
DIM = 384
ERROR_PREFIX = "bertlite embed: error:"
# Characters csv/tsv must quote, a non-ASCII word, and an empty row that must not be skipped.
TRICKY = 'She said "hi, there"\tthen left: café, naïve — 東京'


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def embedder(real_model_path: Path) -> Embedder:
    return Embedder.from_pretrained(real_model_path)


@pytest.fixture(scope="module")
def texts(corpus_texts: list[str]) -> list[str]:
    single_line = [t for t in corpus_texts if "\n" not in t and "\r" not in t][:18]
    return single_line[:3] + [""] + single_line[3:10] + [TRICKY] + single_line[10:]


@pytest.fixture(scope="module")
def reference(embedder: Embedder, texts: list[str]) -> np.ndarray:
    return embedder.encode(texts)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["embed", *args])
    return code, capsys.readouterr().err


def error_line(err: str) -> str:
    """The one line a usage / input error prints."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR_PREFIX), err
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*.tmp"))


# --- inputs ------------------------------------------------------------------------


def _write_table(path: Path, texts: list[str], delimiter: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(["id", "body", "lang"])
        writer.writerows([i, t, "en"] for i, t in enumerate(texts))


def make_input(kind: str, folder: Path, texts: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Writes `texts` in the format `kind`; returns the CLI arguments that read them back."""
    if kind == "txt":
        path = folder / "in.txt"
        path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        return ["-i", str(path)]
    if kind == "jsonl":
        path = folder / "in.jsonl"
        lines = (json.dumps({"id": i, "body": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts))
        path.write_text("".join(lines), encoding="utf-8")
        return ["-i", str(path), "--field", "body"]
    if kind in ("csv", "tsv"):
        path = folder / f"in.{kind}"
        _write_table(path, texts, "," if kind == "csv" else "\t")
        return ["-i", str(path), "--field", "body"]
    assert kind == "stdin"
    data = "".join(t + "\n" for t in texts).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    return ["-i", "-"]


# --- outputs -----------------------------------------------------------------------


def read_npy(path: Path) -> tuple[list[int], np.ndarray]:
    vectors = np.load(path)
    return list(range(len(vectors))), vectors


def read_jsonl(path: Path) -> tuple[list[int], np.ndarray]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(set(r) == {"id", "embedding"} for r in records)
    return [r["id"] for r in records], np.array([r["embedding"] for r in records], dtype=np.float32)


def read_parquet(path: Path) -> tuple[list[int], np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    assert table.schema.names == ["id", "embedding"]
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), DIM)
    embedding = table.column("embedding").combine_chunks()
    vectors = embedding.flatten().to_numpy().reshape(len(table), DIM)
    return table.column("id").to_pylist(), vectors


READERS: dict[str, Callable[[Path], tuple[list[int], np.ndarray]]] = {
    "npy": read_npy,
    "jsonl": read_jsonl,
    "parquet": read_parquet,
}


def check_vectors(path: Path, expected: np.ndarray) -> None:
    ids, vectors = READERS[path.suffix.lstrip(".")](path)
    assert vectors.shape == (len(expected), DIM)
    assert vectors.dtype == np.float32
    assert ids == list(range(len(expected)))
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-6)


# --- round trips -------------------------------------------------------------------


@pytest.mark.parametrize("out_format", ["npy", "jsonl", "parquet"])
@pytest.mark.parametrize("in_format", ["txt", "jsonl", "csv", "tsv", "stdin"])
def test_round_trip(
    in_format: str,
    out_format: str,
    real_model_path: Path,
    texts: list[str],
    reference: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / f"out.{out_format}"
    args = make_input(in_format, tmp_path, texts, monkeypatch)
    code, err = run([str(real_model_path), *args, "-o", str(out), "--quiet"], capsys)
    assert code == 0, err
    check_vectors(out, reference)


def test_empty_line_keeps_its_row(
    real_model_path: Path, embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_bytes(b"first line\n\nthird line\n")
    out = tmp_path / "out.npy"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("embedded 3 texts")  # --quiet: the summary only
    vectors = np.load(out)
    assert vectors.shape == (3, DIM)
    np.testing.assert_allclose(vectors, embedder.encode(["first line", "", "third line"]), rtol=0, atol=1e-6)
    # [CLS] [SEP] alone, not a copy of a neighbour
    np.testing.assert_allclose(vectors[1], embedder.encode([""])[0], rtol=0, atol=1e-5)


def test_utf8_bom_is_not_part_of_the_first_field(
    real_model_path: Path, embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Excel's "CSV UTF-8" and some editors start the file with a byte order mark.
    bom = b"\xef\xbb\xbf"
    (tmp_path / "in.csv").write_bytes(bom + "text,id\nhello world,1\ncafé,2\n".encode())
    (tmp_path / "in.jsonl").write_bytes(bom + b'{"text": "hello world"}\n{"text": "caf\\u00e9"}\n')
    expected = embedder.encode(["hello world", "café"])
    for name in ("in.csv", "in.jsonl"):
        out = tmp_path / f"{name}.npy"
        code, err = run([str(real_model_path), "-i", str(tmp_path / name), "-o", str(out), "--quiet"], capsys)
        assert code == 0, err
        np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-6)


# --- atomic output -----------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.parametrize("out_format", ["npy", "jsonl", "parquet"])
@pytest.mark.usefixtures("umask_022")
def test_output_is_renamed_into_place_with_umask_mode(
    out_format: str, real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("one\ntwo\n", encoding="utf-8")
    out = tmp_path / f"out.{out_format}"
    out.write_text("an older result\n")  # replaced whole, not appended to
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert leftovers(tmp_path) == []
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert len(READERS[out_format](out)[0]) == 2


def test_failed_run_leaves_existing_output_untouched(
    real_model_path: Path, corpus_texts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("short\n" + " ".join(corpus_texts[:40]) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    out.write_bytes(b"previous")
    args = [str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--on-long", "error", "--quiet"]
    code, err = run(args, capsys)
    assert code == 2, err
    assert out.read_bytes() == b"previous"
    assert leftovers(tmp_path) == []


# --- interrupted -------------------------------------------------------------------


def _wait_for_progress(proc: subprocess.Popen[bytes], log: Path, total: int, deadline: float) -> str:
    """stderr so far once the progress bar shows at least one text done (tqdm ends updates with \\r, not \\n)."""
    done = re.compile(rf"\b[1-9]\d*/{total}\b")
    while time.monotonic() < deadline:
        err = log.read_text(encoding="utf-8", errors="replace")
        if done.search(err):
            return err
        if proc.poll() is not None:
            pytest.fail(f"embed exited ({proc.returncode}) before showing progress:\n{err}")
        time.sleep(0.05)
    pytest.fail(f"no progress within the deadline:\n{log.read_text(encoding='utf-8', errors='replace')}")


def test_sigint_exits_130_and_leaves_no_output(real_model_path: Path, corpus_texts: list[str], tmp_path: Path) -> None:
    total = 3000  # tens of seconds on 2 cores: still running when the signal comes
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.txt").write_text("".join(t + "\n" for t in corpus_texts[:total]), encoding="utf-8")
    log = tmp_path / "stderr.log"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "bertlite.cli", "embed", str(real_model_path), "-i", "big.txt", "-o", "out.npy"]
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        _wait_for_progress(proc, log, total, deadline=time.monotonic() + 90)
        # Mid-way: the temp file is there, so the test sees the cleanup, not a run that never wrote.
        assert len(leftovers(work)) == 1
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert "Traceback" not in err
    assert not (work / "out.npy").exists()
    assert sorted(p.name for p in work.iterdir()) == ["big.txt"]


def test_module_entry_point_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bertlite.cli", "embed", "--help"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: bertlite embed" in result.stdout
    assert "empty lines included" in result.stdout


# --- input errors ------------------------------------------------------------------


def _unreadable(kind: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if kind == "missing":
        return folder / "missing.txt"
    if kind == "directory":
        path = folder / "texts.txt"
        path.mkdir()
        return path
    if kind == "parent-is-a-file":
        (folder / "notes.txt").write_text("hello\n")
        return folder / "notes.txt" / "in.txt"
    assert kind == "no-permission"
    path = folder / "secret.txt"
    path.write_text("hello\n")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads a chmod 000 file anyway: make the read fail as it would for a user
        original = Path.open

        def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", denied)
    return path


@pytest.mark.parametrize("kind", ["missing", "directory", "parent-is-a-file", "no-permission"])
def test_unreadable_input_exits_2(
    kind: str,
    real_model_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _unreadable(kind, tmp_path, monkeypatch)
    before = sorted(tmp_path.iterdir())
    code, err = run([str(real_model_path), "-i", str(path), "-o", str(tmp_path / "out.npy")], capsys)
    assert code == 2
    assert str(path) in error_line(err)
    assert sorted(tmp_path.iterdir()) == before


def test_invalid_utf8_names_the_line_unless_replaced(
    real_model_path: Path, embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"first\nsecond\nbad \xff byte\nfourth\n")
    out = tmp_path / "out.npy"
    code, err = run([str(real_model_path), "-i", str(path), "-o", str(out)], capsys)
    assert code == 2
    line = error_line(err)
    assert "line 3" in line and str(path) in line and "--errors replace" in line
    assert not out.exists()

    code, err = run([str(real_model_path), "-i", str(path), "-o", str(out), "--errors", "replace", "--quiet"], capsys)
    assert code == 0, err
    expected = embedder.encode(["first", "second", "bad \ufffd byte", "fourth"])
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-6)


def test_read_texts_api_strict_and_replace(tmp_path: Path) -> None:
    from bertlite.files import InputError, read_texts

    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')  # Latin-1 e-acute: not UTF-8
    message = r"in.jsonl: line 2 is not valid UTF-8 \(at byte offset 13 of the line: b'\\xe9'\)"
    with pytest.raises(InputError, match=message):
        read_texts(str(path))
    assert read_texts(str(path), errors="replace") == ["ok", "caf\ufffd"]


def test_missing_output_folder_exits_2(
    real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    folder = tmp_path / "no" / "such"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(folder / "out.npy")], capsys)
    assert code == 2
    assert str(folder) in error_line(err)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("out_format", ["npy", "jsonl", "parquet"])
def test_full_disk_exits_1_and_leaves_nothing(
    out_format: str,
    real_model_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The writer's temp file is a symlink to /dev/full, where every write fails with ENOSPC: a full disk,
    # for real writes. Unlinking the symlink never touches /dev/full; the guard below makes sure nothing
    # else does either (a chmod or rename that followed the link would change the device itself).
    import bertlite.files

    def full_mkstemp(dir: str, prefix: str, suffix: str) -> tuple[int, str]:
        path = Path(dir, f"{prefix}full{suffix}")
        path.symlink_to("/dev/full")
        return os.open(path, os.O_WRONLY), str(path)

    def guarded(function: Callable[..., None]) -> Callable[..., None]:
        def call(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
            assert not os.path.realpath(path).startswith("/dev/"), f"{function.__name__} would touch {path}"
            return function(path, *args, **kwargs)

        return call

    monkeypatch.setattr(bertlite.files.tempfile, "mkstemp", full_mkstemp)
    monkeypatch.setattr(os, "chmod", guarded(os.chmod))
    monkeypatch.setattr(os, "replace", guarded(os.replace))
    (tmp_path / "in.txt").write_text("one\ntwo\nthree\n")
    out = tmp_path / f"out.{out_format}"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"], capsys)
    assert code == 1
    line = error_line(err)
    assert f"writing {out} failed" in line and "No space left on device" in line and "no output written" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_one_megabyte_line_is_truncated_in_linear_time(
    real_model_path: Path, embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = "word " * 200_000  # 1 MB on one line: 200,000 tokens, far beyond the model's 256
    (tmp_path / "in.txt").write_text(f"short\n{huge}\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    start = time.perf_counter()
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"], capsys)
    seconds = time.perf_counter() - start
    assert code == 0, err
    assert "embedded 2 texts" in err and "1 truncated" in err
    vectors = np.load(out)
    # Truncated: the same vector as any text whose first 256 tokens are the same words.
    np.testing.assert_allclose(vectors[1], embedder.encode(["word " * 1000])[0], rtol=0, atol=1e-5)
    # Tokenizing 1 MB takes well under a second; anything quadratic in the line length would take minutes.
    assert seconds < 30, seconds


def test_bad_output_extension_exits_2(
    real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out.csv"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out)], capsys)
    assert code == 2
    line = error_line(err)
    assert str(out) in line and ".npy" in line and ".parquet" in line
    assert not out.exists() and leftovers(tmp_path) == []


def test_jsonl_line_without_field_exits_2(
    real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"body": "one"}\n{"body": "two"}\n{"title": "three"}\n')
    code, err = run([str(real_model_path), "-i", str(path), "-o", str(tmp_path / "out.npy"), "--field", "body"], capsys)
    assert code == 2
    line = error_line(err)
    assert "line 3" in line and "'body'" in line and str(path) in line
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize("kind", ["csv", "tsv"])
def test_table_without_column_lists_columns(
    kind: str, real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"in.{kind}"
    _write_table(path, ["one", "two"], "," if kind == "csv" else "\t")
    code, err = run([str(real_model_path), "-i", str(path), "-o", str(tmp_path / "out.npy")], capsys)
    assert code == 2
    line = error_line(err)
    assert "'text'" in line and "id, body, lang" in line
    assert not (tmp_path / "out.npy").exists()


def test_missing_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    model = tmp_path / "no-model"
    code, err = run([str(model), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy")], capsys)
    assert code == 2
    assert str(model) in error_line(err)
    assert not (tmp_path / "out.npy").exists()


# --- options and summary -----------------------------------------------------------


def test_pooling_cls_without_normalize(
    real_model_path: Path,
    texts: list[str],
    reference: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out.npy"
    args = make_input("txt", tmp_path, texts, monkeypatch)
    code, err = run([str(real_model_path), *args, "-o", str(out), "--pooling", "cls", "--no-normalize"], capsys)
    assert code == 0, err
    vectors = np.load(out)
    cls = Embedder.from_pretrained(real_model_path, pooling="cls", normalize=False).encode(texts)
    np.testing.assert_allclose(vectors, cls, rtol=0, atol=1e-6)
    assert not np.allclose(vectors, reference, atol=1e-3)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


def test_summary_counts_texts_tokens_and_truncated(
    real_model_path: Path,
    embedder: Embedder,
    corpus_texts: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_text = " ".join(corpus_texts[:40])  # far above the checkpoint's 256 tokens
    batch = corpus_texts[40:60] + [long_text]
    path = tmp_path / "in.txt"
    path.write_text("".join(t + "\n" for t in batch), encoding="utf-8")
    out = tmp_path / "out.npy"
    code, err = run([str(real_model_path), "-i", str(path), "-o", str(out)], capsys)
    assert code == 0, err
    expected = embedder.encode(batch)
    stats = embedder.last_stats
    assert stats.truncated == 1
    summary = err.strip().splitlines()[-1]
    assert f"embedded {len(batch)} texts ({stats.tokens} tokens, 1 truncated)" in summary, summary
    assert re.search(r"\d+(\.\d+)? texts/s", summary) and str(out) in summary
    assert f"{len(batch)}/{len(batch)}" in err  # the progress bar, on stderr too
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-6)


def test_on_long_error_exits_2(
    real_model_path: Path, corpus_texts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.txt"
    path.write_text("short one\n" + " ".join(corpus_texts[:40]) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    code, err = run([str(real_model_path), "-i", str(path), "-o", str(out), "--on-long", "error", "--quiet"], capsys)
    assert code == 2
    line = error_line(err)
    assert "longer than" in line and "256 tokens" in line
    assert not out.exists() and leftovers(tmp_path) == []


def test_parquet_without_pyarrow_gives_install_hint(
    real_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes `import pyarrow` raise ImportError, as when it is not installed.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out.parquet"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out)], capsys)
    assert code == 2
    line = error_line(err)
    assert "pip install pyarrow" in line
    assert not out.exists() and leftovers(tmp_path) == []


def test_writer_that_fails_to_open_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bertlite.files
    from bertlite.files import VectorWriter

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bertlite.files, "open", no_space, raising=False)
    with pytest.raises(OSError, match="No space left"):
        VectorWriter(str(tmp_path / "out.npy"), 10, 4)
    assert list(tmp_path.iterdir()) == []
