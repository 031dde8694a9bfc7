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

import bertlite.cli.embed
import bertlite.jobs.embedder
import bertlite.jobs.prepare
from bertlite.cli import main
from bertlite.jobs.embedder import Embedder
from bertlite.models.bert import BertPreTrainedModel
from tests.helpers import DAMAGED_TOKENIZERS, ROOT, damaged_tokenizer_folder, hide_modules

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
@pytest.mark.slow
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


def test_empty_line_keeps_its_row(real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # float32: bf16 vectors (dtype="auto" on a CPU with native bf16) move with the batch they run in (~4e-3)
    embedder = Embedder.from_pretrained(real_model_path, dtype="float32")
    (tmp_path / "in.txt").write_bytes(b"first line\n\nthird line\n")
    out = tmp_path / "out.npy"
    args = [str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet", "--dtype", "float32"]
    code, err = run(args, capsys)
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


def _default_sigint() -> None:
    """In the child: Ctrl-C's default action, whatever this test process inherited. A shell without job
    control starts background commands (`make test &`) with SIGINT ignored, and the child would inherit it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_mid_run(model: Path, texts: list[str], tmp_path: Path, signum: int) -> tuple[Path, int, str]:
    """Start `bertlite embed` on 3,000 texts in a subprocess writing work/out.npy, send `signum` once its
    temp file shows (the run is mid-way, with something to clean up), and return (work, exit code, stderr).
    The wait is bounded in count and time; 3,000 texts take seconds to minutes after the temp file shows,
    so the signal meets a running process."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "big.txt").write_text("".join(t + "\n" for t in texts[:3000]), encoding="utf-8")
    log = tmp_path / "stderr.log"
    command = [sys.executable, "-m", "bertlite.cli", "embed", str(model), "-i", "big.txt", "-o", "out.npy"]
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=work,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_default_sigint,
        )
    try:
        deadline = time.monotonic() + 90
        for _ in range(3000):
            if leftovers(work) or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.03)
        assert proc.poll() is None, log.read_text(errors="replace")
        assert leftovers(work), log.read_text(errors="replace")
        proc.send_signal(signum)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return work, proc.returncode, log.read_text(encoding="utf-8", errors="replace")


@pytest.mark.slow
def test_sigint_exits_130_and_leaves_no_output(real_model_path: Path, corpus_texts: list[str], tmp_path: Path) -> None:
    work, code, err = signal_mid_run(real_model_path, corpus_texts, tmp_path, signal.SIGINT)
    assert code == 130, err
    assert err.strip().splitlines()[-1].endswith("bertlite embed: interrupted; no output written")
    assert "Traceback" not in err
    assert sorted(p.name for p in work.iterdir()) == ["big.txt"]


def test_module_entry_point_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bertlite.cli", "embed", "--help"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
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
    from bertlite.errors import InputError
    from bertlite.files.readers import read_texts

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
@pytest.mark.slow
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
    import bertlite.files.writers

    def full_mkstemp(dir: str, prefix: str, suffix: str) -> tuple[int, str]:
        path = Path(dir, f"{prefix}full{suffix}")
        path.symlink_to("/dev/full")
        return os.open(path, os.O_WRONLY), str(path)

    def guarded(function: Callable[..., None]) -> Callable[..., None]:
        def call(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
            assert not os.path.realpath(path).startswith("/dev/"), f"{function.__name__} would touch {path}"
            return function(path, *args, **kwargs)

        return call

    monkeypatch.setattr(bertlite.files.writers.tempfile, "mkstemp", full_mkstemp)
    monkeypatch.setattr(os, "chmod", guarded(os.chmod))
    monkeypatch.setattr(os, "replace", guarded(os.replace))
    (tmp_path / "in.txt").write_text("one\ntwo\nthree\n")
    out = tmp_path / f"out.{out_format}"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"], capsys)
    assert code == 1
    line = error_line(err)
    assert f"writing {out} failed" in line and "No space left on device" in line and "no output written" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.slow
def test_one_megabyte_line_is_truncated(
    real_model_path: Path, embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Tokenizing 1 MB takes well under a second; a cost quadratic in the line length would show as
    # minutes in `pytest --durations`, not as a timed assertion that a busy machine can fail.
    huge = "word " * 200_000  # 1 MB on one line: 200,000 tokens, far beyond the model's 256
    (tmp_path / "in.txt").write_text(f"short\n{huge}\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert "embedded 2 texts" in err and "1 truncated" in err
    vectors = np.load(out)
    # Truncated: the same vector as any text whose first 256 tokens are the same words.
    np.testing.assert_allclose(vectors[1], embedder.encode(["word " * 1000])[0], rtol=0, atol=1e-5)


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


@pytest.mark.parametrize(("flags", "packs"), [([], True), (["--no-pack-weights"], False)])
@pytest.mark.slow
def test_pack_weights_flag_reaches_the_model_and_keeps_the_vectors(
    flags: list[str],
    packs: bool,
    real_model_path: Path,
    texts: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[bool] = []
    original = bertlite.jobs.prepare.optimize

    def recording(model: BertPreTrainedModel, pack_weights: bool = True, **kwargs: Any) -> BertPreTrainedModel:
        seen.append(pack_weights)
        return original(model, pack_weights=pack_weights, **kwargs)

    monkeypatch.setattr(bertlite.jobs.prepare, "optimize", recording)
    out = tmp_path / "out.npy"
    args = make_input("txt", tmp_path, texts, monkeypatch)
    code, err = run([str(real_model_path), *args, "-o", str(out), "--dtype", "float32", *flags], capsys)
    assert code == 0, err
    assert seen == [packs]
    reference = Embedder.from_pretrained(real_model_path, dtype="float32", pack_weights=not packs).encode(texts)
    np.testing.assert_allclose(np.load(out), reference, rtol=0, atol=1e-6)


@pytest.mark.slow
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


@pytest.mark.slow
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
    hide_modules(monkeypatch, "pyarrow", "pyarrow.parquet")
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out.parquet"
    code, err = run([str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out)], capsys)
    assert code == 2
    line = error_line(err)
    assert "pip install pyarrow" in line
    assert not out.exists() and leftovers(tmp_path) == []


def test_writer_that_fails_to_open_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bertlite.files.writers
    from bertlite.files.writers import VectorWriter

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bertlite.files.writers, "open", no_space, raising=False)
    with pytest.raises(OSError, match="No space left"):
        VectorWriter(str(tmp_path / "out.npy"), 10, 4)
    assert list(tmp_path.iterdir()) == []


# --- reliability: outputs, signals, bad values, memory (issue 13) ---------------------


@pytest.fixture(scope="module")
def tiny_model(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer, 32-wide model with the real tokenizer, saved as a folder: loads and runs in moments."""
    import shutil

    import torch

    import bertlite

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-model")
    config = bertlite.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    bertlite.BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    shutil.copy(real_model_path / "tokenizer.json", folder)
    return folder


@pytest.mark.parametrize("damage", ["truncated", "folder", "vocab_without_special_tokens"])
def test_damaged_tokenizer_exits_2_naming_the_file(
    damage: str, real_model_path: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: a traceback ("Exception: EOF while parsing ...") and exit 1; a tokenizer.json folder: vocab.txt used.
    folder = damaged_tokenizer_folder(real_model_path, tmp_path / "model", damage, weights_from=tiny_model)
    source = tmp_path / "in.txt"
    source.write_text("hello\n")
    code, err = run([str(folder), "-i", str(source), "-o", str(tmp_path / "out.npy"), "--quiet"], capsys)
    assert code == 2
    line = error_line(err)
    assert f"{folder / DAMAGED_TOKENIZERS[damage][0]}: not a " in line
    assert not (tmp_path / "out.npy").exists()


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """For runs that must be refused before any work: loading the model fails the test."""
    import bertlite.cli

    def load(args: object, kind: str | None = None) -> None:
        pytest.fail("the model was loaded: the run was not refused up front")

    monkeypatch.setattr(bertlite.cli.embed, "load_job", load)


def cli_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **extra,
    }


# The tiny model's batches are too small to gain from threads; one keeps a busy machine from thrashing.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB filesystem (tmpfs), so writes fail with ENOSPC as on a full disk."""
    if os.geteuid() != 0:
        pytest.skip("mounting a 64 KiB tmpfs needs root (CI runs the tests as root)")
    folder = tmp_path / "small"
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("no mount command here")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.slow
def test_full_small_filesystem_exits_1_and_keeps_the_earlier_file(
    tiny_model: Path, small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("".join(f"row number {i}\n" for i in range(800)))  # 800 x 32 floats: over 64 KiB
    for fmt in ("npy", "jsonl", "parquet"):
        (small_disk / f"out.{fmt}").write_bytes(b"the earlier result")
    # .npy in a subprocess: the memory-mapped writer this replaces died of SIGBUS (exit 135) here.
    out = small_disk / "out.npy"
    command = [sys.executable, "-m", "bertlite.cli", "embed", str(tiny_model), "-i", str(source), "-o", str(out)]
    result = subprocess.run(
        [*command, "--quiet"], env=cli_env(**ONE_THREAD), capture_output=True, timeout=120, text=True
    )
    assert result.returncode == 1, result.stderr
    line = error_line(result.stderr)
    assert f"writing {out} failed: No space left on device (ENOSPC); no output written" in line
    for fmt in ("jsonl", "parquet"):
        out = small_disk / f"out.{fmt}"
        code, err = run([str(tiny_model), "-i", str(source), "-o", str(out), "--quiet"], capsys)
        assert code == 1, err
        assert f"writing {out} failed" in error_line(err) and "No space left on device" in err
    assert sorted(p.name for p in small_disk.iterdir()) == ["out.jsonl", "out.npy", "out.parquet"]
    assert all(p.read_bytes() == b"the earlier result" for p in small_disk.iterdir())


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize("how", ["same name", "symlink"])
def test_output_that_is_the_input_is_refused(how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "texts.jsonl"
    source.write_text('{"text": "precious"}\n')
    out = source
    if how == "symlink":
        out = tmp_path / "alias.jsonl"
        out.symlink_to(source)
    code, err = run(["some-model", "-i", str(source), "-o", str(out)], capsys)
    assert code == 2
    assert f"{out} is the input {source}; writing it would destroy the input" in error_line(err)
    assert source.read_text() == '{"text": "precious"}\n'


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize(
    ("option", "value"), [("--max-length", "0"), ("--max-length", "-1"), ("--batch-size", "0"), ("--max-tokens", "-5")]
)
def test_bad_counts_are_refused_by_option_name(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    code, err = run(
        ["some-model", "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy"), option, value], capsys
    )
    assert code == 2
    assert error_line(err) == f"{ERROR_PREFIX} {option} must be >= 1, got {value}"


@pytest.mark.usefixtures("no_model")
def test_existing_folder_as_output_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    (tmp_path / "vectors.npy").mkdir()
    code, err = run(["some-model", "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "vectors.npy")], capsys)
    assert code == 2
    assert f"{tmp_path / 'vectors.npy'} is a folder" in error_line(err)


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("vectors.npy/", "vectors.npy/ ends in a slash, which names a folder; -o takes a file: drop the slash"),
        ("vectors.parquet", "vectors.parquet: --resume takes .npy or .jsonl"),
    ],
)
def test_outputs_refused_before_any_work(
    output: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: -o vectors.npy/ wrote the file vectors.npy.
    (tmp_path / "in.txt").write_text("hello\n")
    code, err = run(["some-model", "-i", str(tmp_path / "in.txt"), "-o", f"{tmp_path}/{output}", "--resume"], capsys)
    assert code == 2
    assert message in error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.usefixtures("no_model")
def test_csv_with_the_text_column_twice_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: exit 0, the last of the two columns embedded.
    (tmp_path / "in.csv").write_text("text,text\nfirst,second\n")
    code, err = run(["some-model", "-i", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.npy")], capsys)
    assert code == 2
    assert "in.csv: the header names column 'text' 2 times (columns 1, 2); rename all but one" in error_line(err)


def test_device_this_machine_lacks_exits_2(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    (tmp_path / "in.txt").write_text("hello\n")
    devices = ["tpu"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in devices:
        args = [str(tiny_model), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy"), "--device", device]
        code, err = run(args, capsys)
        assert code == 2, err
        assert f"device={device!r} is not" in error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_overwrite_keeps_the_mode_and_no_overwrite_refuses(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    out = tmp_path / "private.npy"
    out.write_bytes(b"earlier")
    out.chmod(0o600)
    args = [str(tiny_model), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"]
    code, err = run([*args, "--no-overwrite"], capsys)
    assert code == 2
    assert f"{out} exists and --no-overwrite was given" in error_line(err)
    assert out.read_bytes() == b"earlier"
    code, err = run(args, capsys)
    assert code == 0, err
    assert err.strip().endswith(f"-> {out} (replaced)")
    assert np.load(out).shape == (2, 32)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_lone_surrogate_in_jsonl_exits_2_unless_replaced(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "fine"}\n{"text": "half \\ud800 a pair"}\n')
    out = tmp_path / "out.npy"
    code, err = run([str(tiny_model), "-i", str(source), "-o", str(out)], capsys)
    assert code == 2
    line = error_line(err)
    assert f"{source}: line 2: field 'text' holds a lone surrogate" in line and "--errors replace" in line
    assert not out.exists()
    code, err = run([str(tiny_model), "-i", str(source), "-o", str(out), "--errors", "replace", "--quiet"], capsys)
    assert code == 0, err
    expected = Embedder.from_pretrained(tiny_model).encode(["fine", "half \ufffd a pair"])
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-6)


def test_named_pipe_is_read_once(tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    fifo = tmp_path / "rows.txt"  # e.g. -i <(zcat rows.txt.gz): a file is checked in a first pass, a pipe cannot be
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "w") as f:
            f.write("one\ntwo\nthree\n")

    out = tmp_path / "out.npy"
    codes: list[int] = []
    args = ["embed", str(tiny_model), "-i", str(fifo), "-o", str(out), "--quiet"]
    # Threads, joined with a deadline: a second open of the pipe would wait for a writer for ever.
    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=lambda: codes.append(main(args)))]
    threads[1].daemon = True
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert codes == [0], capsys.readouterr().err
    np.testing.assert_allclose(np.load(out), Embedder.from_pretrained(tiny_model).encode(["one", "two", "three"]))


@pytest.mark.parametrize("out_format", ["npy", "jsonl"])
def test_non_finite_vector_exits_1_naming_the_row(
    out_format: str,
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import torch

    import bertlite.cli

    embedder = Embedder.from_pretrained(tiny_model)
    with torch.no_grad():  # one NaN weight, reached only by the token "zebra" (row 2)
        embedder.model.embeddings.word_embeddings.weight[embedder.tokenizer.token_to_id("zebra")] = float("nan")
    monkeypatch.setattr(bertlite.cli.embed, "load_job", lambda args, kind=None: embedder)
    source = tmp_path / "in.txt"
    source.write_text("a cat\na dog\na zebra\na bird\n")
    out = tmp_path / f"out.{out_format}"
    out.write_bytes(b"earlier")
    code, err = run([str(tiny_model), "-i", str(source), "-o", str(out), "--quiet"], capsys)
    assert code == 1
    assert f"{source}: row 2 (0-based) gave a vector with NaN or Inf" in error_line(err)
    assert out.read_bytes() == b"earlier"
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_sigterm_exits_143_and_keeps_the_earlier_output(
    real_model_path: Path, corpus_texts: list[str], tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "out.npy").write_bytes(b"the earlier result")
    work, code, err = signal_mid_run(real_model_path, corpus_texts, tmp_path, signal.SIGTERM)
    assert code == 143, err
    assert err.strip().splitlines()[-1].endswith("bertlite embed: terminated (SIGTERM); no output written")
    assert "Traceback" not in err
    assert sorted(p.name for p in work.iterdir()) == ["big.txt", "out.npy"]
    assert (work / "out.npy").read_bytes() == b"the earlier result"


def kill_after_first_rows(command: list[str], work: Path) -> None:
    """Run `command` in `work` and SIGKILL it once its journal shows (its first rows are saved); bounded wait."""
    proc = subprocess.Popen(command, cwd=work, env=cli_env(**ONE_THREAD), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        for _ in range(4000):
            if list(work.glob(".*.journal.tmp")) or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.03)
        assert proc.poll() is None, "the run ended before it could be killed mid-way"
        proc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["npy", "jsonl"])
def test_resume_after_sigkill_gives_the_vectors_of_one_run(fmt: str, tiny_model: Path, tmp_path: Path) -> None:
    # Before: a killed job's temp file stayed forever and a rerun started from row 0.
    texts = [f"line {i} of a long job" for i in range(40_000)]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts))
    command = [sys.executable, "-m", "bertlite.cli", "embed", str(tiny_model), "-i", "in.txt", "-o", f"out.{fmt}"]
    command += ["--dtype", "float32"]  # each process's "auto" may time otherwise on a busy machine
    kill_after_first_rows([*command, "--quiet"], tmp_path)
    assert not (tmp_path / f"out.{fmt}").exists() and leftovers(tmp_path)
    result = subprocess.run(
        [*command, "--quiet", "--resume"],
        cwd=tmp_path,
        env=cli_env(**ONE_THREAD),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    resumed = int(re.search(r"resuming after the first (\d+) rows", result.stderr).group(1))
    assert resumed > 0 and resumed % 2048 == 0  # whole chunks, as saved
    assert f"embedded {len(texts) - resumed} texts" in result.stderr.splitlines()[-1]
    expected = Embedder.from_pretrained(tiny_model, dtype="float32").encode(texts)
    if fmt == "npy":
        vectors = np.load(tmp_path / "out.npy")
    else:
        rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == list(range(len(texts)))
        vectors = np.array([r["embedding"] for r in rows], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_run_after_a_sigkill_cleans_up_and_resume_refuses_other_rows(tiny_model: Path, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("".join(f"row {i}\n" for i in range(40_000)))
    command = [sys.executable, "-m", "bertlite.cli", "embed", str(tiny_model), "-i", "in.txt", "-o", "out.npy"]
    command += ["--dtype", "float32"]  # the rows are what differs here, not each process's "auto" verdict
    kill_after_first_rows([*command, "--quiet"], tmp_path)
    left = leftovers(tmp_path)
    (tmp_path / "in.txt").write_text("".join(f"other row {i}\n" for i in range(40_000)))
    run_again = dict(cwd=tmp_path, env=cli_env(**ONE_THREAD), capture_output=True, text=True, timeout=300)
    result = subprocess.run([*command, "--quiet", "--resume"], **run_again)
    assert result.returncode == 2
    assert "--resume: the first " in error_line(result.stderr) and "rows of in.txt are not those" in result.stderr
    assert len(leftovers(tmp_path)) == len(left)  # kept, for a resume on the right input
    result = subprocess.run([*command, "--quiet"], **run_again)
    assert result.returncode == 0, result.stderr
    assert leftovers(tmp_path) == [] and np.load(tmp_path / "out.npy").shape == (40_000, 32)


# Runs a command and prints its peak resident memory (KiB): a fresh process per run, so
# RUSAGE_CHILDREN holds that one command only.
_PEAK_RSS = """
import resource, subprocess, sys
with open(sys.argv[1], "rb") as stdin:
    code = subprocess.run(sys.argv[2:], stdin=stdin, stdout=subprocess.DEVNULL).returncode
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_input(tiny_model: Path, tmp_path: Path) -> None:
    small, large = 2_000, 40_000  # 20x the rows
    row = "a line of text that is about one hundred characters long, give or take a few words here and there\n"
    peaks = {}
    for rows in (small, large):
        source = tmp_path / f"in-{rows}.txt"
        source.write_text(row * rows)
        out = tmp_path / f"out-{rows}.npy"
        # Read from stdin: one pass, row count unknown ahead. 16 tokens a text keep the run quick.
        options = ["-i", "-", "-o", str(out), "--quiet", "--max-length", "16"]
        command = [sys.executable, "-m", "bertlite.cli", "embed", str(tiny_model), *options]
        result = subprocess.run(
            [sys.executable, "-c", _PEAK_RSS, str(source), *command],
            env=cli_env(**ONE_THREAD),
            capture_output=True,
            text=True,
            timeout=300,
        )
        code, peak_kib = map(int, result.stdout.split())
        assert code == 0, result.stderr
        assert np.load(out, mmap_mode="r").shape == (rows, 32)
        peaks[rows] = peak_kib * 1024
    output_growth = (large - small) * 32 * 4  # 4.9 MB: the vectors themselves (written out, not held)
    # The heap settles over the first ~10 chunks (measured: +10-13 MiB from 2,500 to 50,000 rows, flat
    # after 20,000). The input grows by 3.8 MB; the reader that held it whole grew by ~90 MiB here.
    allowance = 16 << 20
    growth = peaks[large] - peaks[small]
    print(f"peak RSS {peaks[small] / 2**20:.1f} MiB at {small} rows, {peaks[large] / 2**20:.1f} MiB at {large} rows")
    assert growth <= output_growth + allowance, (peaks, output_growth)


@pytest.mark.parametrize("fault", ["nan_weight", "missing_weight"])
def test_load_error_is_one_line_without_python_only_advice(
    fault: str, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    state = load_file(folder / "model.safetensors")
    if fault == "nan_weight":
        state["encoder.layer.0.output.dense.bias"][0] = float("nan")
    else:
        del state["encoder.layer.1.output.dense.bias"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "in.txt").write_text("one text\n")
    code, err = run([str(folder), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy")], capsys)
    assert code == 2
    error_line(err)
    named = "encoder.layer.0.output.dense.bias" if fault == "nan_weight" else "encoder.layer.1.output.dense.bias"
    assert named in err
    assert "allow_nonfinite" not in err and "strict=False" not in err
    assert not (tmp_path / "out.npy").exists()
