"""`bertlite rerank`: the scores of bertlite.CrossEncoder and of sentence-transformers, file in, jsonl out;
SIGTERM as `bertlite embed` handles it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder as STCrossEncoder

from bertlite.cli import main
from tests.helpers import ROOT, cross_encoder_folder

DOCS = ["A list is a mutable sequence.", "Tuples are immutable.", "naïve café ✓ 日本語", "dictionaries " * 80, "x"]
QUERY = "what is a list"


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rerank-cli")
    return {
        "one": cross_encoder_folder(real_model_path, root / "one", num_labels=1, max_length=48),
        "three": cross_encoder_folder(real_model_path, root / "three", num_labels=3, seed=1),
    }


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_query_and_docs_file_give_sentence_transformers_scores(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    out = tmp_path / "scores.jsonl"
    argv = ["rerank", str(folders["one"]), "--query", QUERY, "-i", str(docs), "-o", str(out), "--dtype", "float32"]
    code, err = run(argv, capsys)  # float32, as sentence-transformers runs, whatever "auto" picks on this CPU
    assert code == 0, err
    assert "scored 5 pairs" in err
    got = rows(out)
    expected = STCrossEncoder(str(folders["one"]), device="cpu").predict([(QUERY, d) for d in DOCS])
    assert [r["id"] for r in got] == list(range(len(DOCS)))
    np.testing.assert_allclose([r["score"] for r in got], expected, atol=1e-5)


def test_pairs_file_top_k_and_raw_scores(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = [(f"query {i}", d) for i, d in enumerate(DOCS)]
    source = tmp_path / "pairs.tsv"
    source.write_text("q\tpassage\n" + "".join(f"{q}\t{d}\n" for q, d in pairs))
    out = tmp_path / "best.jsonl"
    argv = ["rerank", str(folders["one"]), "-i", str(source), "-o", str(out), "--query-field", "q"]
    code, err = run([*argv, "--field", "passage", "--top-k", "2", "--raw-scores", "--dtype", "float32"], capsys)
    assert code == 0, err
    st = STCrossEncoder(str(folders["one"]), device="cpu")
    logits = st.predict(pairs, activation_fn=lambda x: x)
    best = np.argsort(-logits, kind="stable")[:2]
    got = rows(out)
    assert [r["id"] for r in got] == best.tolist()
    np.testing.assert_allclose([r["score"] for r in got], logits[best], atol=1e-5)


def test_several_labels_give_scores_and_the_best_label(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(DOCS) + "\n")
    out = tmp_path / "labels.jsonl"
    argv = ["rerank", str(folders["three"]), "--query", QUERY, "-i", str(docs), "-o", str(out), "--dtype", "float32"]
    code, err = run(argv, capsys)
    assert code == 0, err
    expected = STCrossEncoder(str(folders["three"]), device="cpu").predict([(QUERY, d) for d in DOCS])
    got = rows(out)
    np.testing.assert_allclose([r["scores"] for r in got], expected, atol=1e-5)
    assert [r["label"] for r in got] == [f"LABEL_{i}" for i in expected.argmax(axis=1)]


@pytest.mark.parametrize(
    ("setup", "extra", "message"),
    [
        ("txt", [], r"docs.txt: a .txt file holds one text per line; give --query"),
        ("jsonl", ["--query-field", "question"], r"line 1 has no string field 'question'"),
        ("empty-doc", ["--query", QUERY], r"row 1 \(0-based\) has an empty text"),
        ("jsonl", ["--query", QUERY, "--top-k", "0"], r"--top-k must be >= 1, got 0"),
        ("npy", ["--query", QUERY], r"rerank writes .jsonl"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    setup: str,
    extra: list[str],
    message: str,
    folders: dict[str, Path],
    real_model_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / ("scores.npy" if setup == "npy" else "scores.jsonl")
    if setup == "txt":
        source = tmp_path / "docs.txt"
        source.write_text("a\nb\n")
    elif setup == "empty-doc":
        source = tmp_path / "docs.jsonl"
        source.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": ""}) + "\n")
    else:
        source = tmp_path / "docs.jsonl"
        source.write_text(json.dumps({"query": "q", "text": "t"}) + "\n")
    code, err = run(["rerank", str(folders["one"]), "-i", str(source), "-o", str(out), *extra], capsys)
    assert code == 2
    # Once the model loaded, its note on the precision (where --dtype auto may run faster) precedes the error.
    err = "".join(line for line in err.splitlines(keepends=True) if "--dtype auto may run" not in line)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("bertlite rerank: error: ")
    assert re.search(message, err), err
    assert not out.exists() and not list(tmp_path.glob(".scores*"))


def test_an_embedding_model_is_refused_by_name(
    real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs.txt"
    docs.write_text("a\n")
    out = tmp_path / "s.jsonl"
    code, err = run(["rerank", str(real_model_path), "--query", "q", "-i", str(docs), "-o", str(out)], capsys)
    assert code == 2 and "Traceback" not in err
    assert "embedding model" in err and "Embedder" in err
    assert not out.exists()


@pytest.mark.slow
def test_sigterm_mid_run_exits_143_and_keeps_the_earlier_output(folders: dict[str, Path], tmp_path: Path) -> None:
    # Before: killed at once (-15 to Python, 143 from a shell), no message, its temp file left beside the output.
    (tmp_path / "docs.txt").write_text("".join(f"document {i} about lists and tuples\n" for i in range(300_000)))
    (tmp_path / "scores.jsonl").write_text("the earlier output\n")
    command = [sys.executable, "-m", "bertlite.cli", "rerank", str(folders["one"]), "--query", QUERY]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    log = tmp_path / "stderr.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [*command, "-i", "docs.txt", "-o", "scores.jsonl"], cwd=tmp_path, env=env, stderr=stderr
        )
    try:
        deadline = time.monotonic() + 120
        for _ in range(4000):  # until the temp file shows: scoring has begun, with something to clean up
            if list(tmp_path.glob(".scores*.tmp")) or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.03)
        assert proc.poll() is None and list(tmp_path.glob(".scores*.tmp")), log.read_text()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "bertlite rerank: terminated (SIGTERM); no output written", err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.txt", "scores.jsonl", "stderr.log"]
    assert (tmp_path / "scores.jsonl").read_text() == "the earlier output\n"
