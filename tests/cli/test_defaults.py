"""`bertlite embed` and `bertlite rerank` without --dtype run float32: sentence-transformers' numbers within 1e-5.
BERTLITE_AUTO_DTYPE=bfloat16 is set, so a default that went through --dtype auto would run bfloat16; and the
line each command prints at load about the precision it runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder as STCrossEncoder
from sentence_transformers import SentenceTransformer as STSentenceTransformer

from bertlite.cli import build_parser, main
from tests.helpers import cross_encoder_folder

# What they check must hold where dtype="auto" would run bfloat16 (the defaults never ask for it).
pytestmark = pytest.mark.usefixtures("auto_would_pick_bfloat16")

TOL = 1e-5
TEXTS = ["A man is eating food.", "a", "naïve café, Größe, 日本語のテキスト 🙂", "dictionaries " * 80]
QUERY = "what is a list"
FLOAT32_NOTE = "running float32 (the reference's numbers); --dtype auto may run bfloat16 here"


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("defaults-cli") / "texts.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    return err


@pytest.mark.parametrize("command", ["embed", "rerank", "serve"])
def test_dtype_defaults_to_float32(command: str) -> None:
    argv = [command, "MODEL", *(("-i", "in.txt", "-o", "out.npy") if command != "serve" else ())]
    assert build_parser().parse_args(argv).dtype == "float32"


def test_embed_equals_sentence_transformers(
    real_model_path: Path, texts_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "vectors.npy"
    argv = ["embed", str(real_model_path), "-i", str(texts_file), "-o", str(out)]
    err = run(argv, capsys)
    expected = STSentenceTransformer(str(real_model_path), device="cpu").encode(TEXTS)
    assert np.abs(np.load(out) - expected).max() <= TOL
    assert f"bertlite embed: {FLOAT32_NOTE}\n" in err
    assert "(float32)" in err.splitlines()[-1], err  # the summary names the precision that ran
    out.unlink()
    assert FLOAT32_NOTE not in run([*argv, "--quiet"], capsys)  # --quiet: no note


def test_rerank_equals_sentence_transformers(
    real_model_path: Path, texts_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cross_encoder_folder(real_model_path, tmp_path / "reranker", num_labels=1)
    out = tmp_path / "scores.jsonl"
    err = run(["rerank", str(folder), "--query", QUERY, "-i", str(texts_file), "-o", str(out)], capsys)
    expected = STCrossEncoder(str(folder), device="cpu").predict([(QUERY, t) for t in TEXTS])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))
    assert np.abs(np.array([r["score"] for r in rows]) - expected).max() <= TOL
    assert f"bertlite rerank: {FLOAT32_NOTE}\n" in err
    assert "(float32)" in err.splitlines()[-1], err


@pytest.mark.slow  # dtype="auto" holds bfloat16 to the job's bar: a second forward of its calibration texts
def test_dtype_auto_says_what_runs_and_why(
    real_model_path: Path, texts_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["embed", str(real_model_path), "-i", str(texts_file), "-o", str(tmp_path / "v.npy"), "--quiet"]
    err = run([*argv, "--dtype", "auto"], capsys)
    notes = [line for line in err.splitlines() if line.startswith("bertlite embed: --dtype auto runs ")]
    assert len(notes) == 1, err
    precision = err.splitlines()[-1].split("(")[-1].split(")")[0]  # the summary's "(bfloat16)" or "(float32)"
    assert notes[0].startswith(f"bertlite embed: --dtype auto runs {precision}: dtype='auto'"), err
    assert FLOAT32_NOTE not in err


def test_no_note_where_auto_keeps_float32(
    real_model_path: Path,
    texts_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "float32")
    err = run(["embed", str(real_model_path), "-i", str(texts_file), "-o", str(tmp_path / "v.npy")], capsys)
    assert "--dtype auto" not in err
