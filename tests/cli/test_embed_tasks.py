"""`bertlite embed --task`: SPLADE, ColBERT and per-token vectors into jsonl, against sentence-transformers'
encode / encode_query / encode_document on tiny random checkpoints saved in the test (and the real model)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sentence_transformers import MultiVectorEncoder as STMultiVectorEncoder
from sentence_transformers import SentenceTransformer
from sentence_transformers import SparseEncoder as STSparseEncoder

import bertlite.cli.embed_tasks
import bertlite.files.partial
from bertlite.cli import main
from bertlite.jobs.kinds import load_job
from tests.helpers import COLBERT_OPTIONS, colbert_folder, cross_encoder_folder, masked_lm_folder, splade_folder
from tests.serve_helpers import one_torch_thread  # noqa: F401 (an autouse fixture)

TEXTS = [
    "The weather is lovely today.",
    "a",
    "Paris, the capital -- and largest city -- of France; home to the Louvre!",
    "naïve café, Größe, 日本語のテキスト, emoji 🙂 and ∑ math",
    "Python's asyncio runs coroutines on an event loop; " * 8,  # past every max length here
    "",
]
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("embed-tasks")
    return {
        "splade": splade_folder(
            masked_lm_folder(real_model_path, root / "mlm"), root / "splade", max_seq_length=24, prompts=PROMPTS
        ),
        "colbert": colbert_folder(real_model_path, root / "colbert", **COLBERT_OPTIONS),
    }


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"body": t}) + "\n" for t in TEXTS))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["embed", *argv, "--quiet"])
    return code, capsys.readouterr().err


def records(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(len(rows)))
    return rows


def assert_sparse(rows: list[dict], expected: torch.Tensor) -> None:
    dense = expected.to_dense()
    assert len(rows) == len(dense)
    for i, (row, theirs) in enumerate(zip(rows, dense, strict=True)):
        active = torch.nonzero(theirs).flatten().tolist()
        assert row["indices"] == active, f"row {i}: active dimensions differ"  # ascending, as nonzero gives them
        np.testing.assert_allclose(row["values"], theirs[active].numpy(), atol=1e-5, rtol=0)


def assert_tokens(rows: list[dict], expected: list[torch.Tensor]) -> None:
    assert len(rows) == len(expected)
    for i, (row, theirs) in enumerate(zip(rows, expected, strict=True)):
        ours = np.asarray(row["embedding"], dtype=np.float32)
        assert ours.shape == tuple(theirs.shape), f"row {i}: {ours.shape} tokens kept, expected {tuple(theirs.shape)}"
        np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("as_query", [False, True], ids=["documents", "queries"])
def test_splade_folder_is_detected_and_gives_sentence_transformers_vectors(
    as_query: bool, folders: dict[str, Path], source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sparse.jsonl"
    argv = [str(folders["splade"]), "-i", str(source), "--field", "body", "-o", str(out), "--dtype", "float32"]
    code, err = run([*argv, *(["--as-query"] if as_query else [])], capsys)
    assert code == 0, err
    assert f"encoded {len(TEXTS)} texts as sparse" in err
    st = STSparseEncoder(str(folders["splade"]), device="cpu")
    expected = st.encode_query(TEXTS) if as_query else st.encode_document(TEXTS)
    assert_sparse(records(out), expected)
    assert not torch.equal(st.encode_query(TEXTS[:1]).to_dense(), st.encode_document(TEXTS[:1]).to_dense())


@pytest.mark.parametrize("as_query", [False, True], ids=["documents", "queries"])
def test_colbert_folder_is_detected_and_gives_sentence_transformers_vectors(
    as_query: bool, folders: dict[str, Path], source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "colbert.jsonl"
    # Batches of 2 and a small token budget: rows of different lengths share batches and chunks.
    argv = [str(folders["colbert"]), "-i", str(source), "--field", "body", "-o", str(out), "--batch-size", "2"]
    code, err = run([*argv, "--dtype", "float32", *(["--as-query"] if as_query else [])], capsys)
    assert code == 0, err
    assert f"encoded {len(TEXTS)} texts as multi-vector" in err
    st = STMultiVectorEncoder(str(folders["colbert"]), device="cpu")
    expected = st.encode_query(TEXTS) if as_query else st.encode_document(TEXTS)
    assert_tokens(records(out), expected)


def test_token_embeddings_of_the_real_model_from_stdin(
    real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [t for t in TEXTS if t]
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO("".join(t + "\n" for t in texts).encode())))
    monkeypatch.setattr(bertlite.cli.embed_tasks, "CHUNK_ROWS", 2)  # several chunks, each written in order
    out = tmp_path / "tokens.jsonl"
    argv = [str(real_model_path), "-i", "-", "-o", str(out), "--task", "token-embeddings", "--dtype", "float32"]
    code, err = run([*argv, "--max-length", "16"], capsys)
    assert code == 0, err
    st = SentenceTransformer(str(real_model_path), device="cpu")
    st.max_seq_length = 16
    assert_tokens(records(out), st.encode(texts, output_value="token_embeddings"))


def test_resume_continues_a_sparse_run_after_its_saved_chunks(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bertlite.cli.embed_tasks, "CHUNK_ROWS", 2)
    texts = [f"row {i} of the input" for i in range(7)]
    long = "word " * 100  # refused by --on-long error: the run fails in its third chunk
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("".join(t + "\n" for t in [*texts[:5], long, texts[6]]))
    argv = [str(folders["splade"]), "-i", str(source), "-o", str(out), "--dtype", "float32", "--on-long", "error"]
    argv.append("--resume")
    code, err = run(argv, capsys)
    assert code == 2 and "text 5 (0-based) is longer than" in err
    assert "the 4 rows made so far are kept for a later --resume" in err
    assert not out.exists()
    # The kept rows belong to this process; a later run sees them as a dead run's, as after a crash.
    monkeypatch.setattr(bertlite.files.partial, "_alive", lambda pid: False)
    source.write_text("".join(t + "\n" for t in texts))
    code, err = run(argv, capsys)
    assert code == 0, err
    assert "resuming after the first 4 rows" in err and "(after 4 rows of an earlier run)" in err
    assert_sparse(records(out), STSparseEncoder(str(folders["splade"]), device="cpu").encode_document(texts))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    # Another task's kept rows are not taken over.
    code, err = run([*argv[:-1], "--as-query", "--resume"], capsys)
    assert code == 0, err
    assert "resuming" not in err


@pytest.mark.parametrize(("model", "made"), [("splade", "a sparse vector"), ("colbert", "token vectors")])
def test_non_finite_row_exits_1_naming_the_row(
    model: str,
    made: str,
    folders: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = load_job("sparse" if model == "splade" else "multi-vector", folders[model], dtype="float32")
    # One NaN weight, reached only by row 2, the one long enough to have a 9th token (not a word's
    # embedding: SPLADE's vocabulary projection is tied to those, so every row would score it).
    with torch.no_grad():
        job.bert.embeddings.position_embeddings.weight[8] = float("nan")
    monkeypatch.setattr(bertlite.cli.embed_tasks, "load_job", lambda args, kind=None: job)
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("a cat\na dog\na zebra is a striped animal of africa\na bird\n")
    out.write_bytes(b"earlier")
    code, err = run([str(folders[model]), "-i", str(source), "-o", str(out)], capsys)
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert f"{source}: row 2 (0-based) gave {made} with NaN or Inf" in err
    assert out.read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.jsonl"]


def test_a_cross_encoder_points_to_rerank(
    real_model_path: Path, tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cross_encoder_folder(real_model_path, tmp_path / "reranker", num_labels=1)
    capsys.readouterr()  # transformers' saving bars
    out = tmp_path / "out.jsonl"
    code, err = run([str(folder), "-i", str(source), "--field", "body", "-o", str(out)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(r"is a cross-encoder: .*; use bertlite rerank ", err), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("splade", ["-o", "OUT.npy"], r"out.npy: --task sparse writes .jsonl only"),
        ("colbert", ["-o", "OUT.parquet"], r"out.parquet: --task multi-vector writes .jsonl only"),
        ("real", ["--task", "token-embeddings", "-o", "OUT.npy"], r"--task token-embeddings writes .jsonl only"),
        ("splade", ["--pooling", "cls"], r"--pooling does not apply to --task sparse"),
        ("splade", ["--normalize"], r"--normalize does not apply to --task sparse"),
        ("splade", ["--truncate-dim", "4"], r"--truncate-dim does not apply to --task sparse"),
        ("real", ["--as-query"], r"--as-query does not apply to --task embedding"),
        ("real", ["--task", "token-embeddings", "--truncate-dim", "8"], r"--truncate-dim does not apply to --task"),
        ("real", ["--task", "token-embeddings", "--as-query"], r"--as-query does not apply to --task token-emb"),
        ("colbert", ["--engine", "ray", "-o", "OUT"], r"--task multi-vector: --engine ray writes dense embeddings"),
        ("real", ["--task", "sparse", "--engine", "ray", "-o", "OUT"], r"--task sparse: --engine ray writes dense"),
        ("real", ["--task", "sparse"], r"(?i)masked-lm|SPLADE"),
        ("splade", ["--prompt-name", "nope"], r"prompt_name='nope' is not one of the prompts \(document, query\)"),
    ],
)
def test_refusals_are_one_line_exit_2_and_leave_no_output(
    model: str,
    extra: list[str],
    message: str,
    folders: dict[str, Path],
    real_model_path: Path,
    source: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = real_model_path if model == "real" else folders[model]
    extra = [str(tmp_path / e.lower()) if e.startswith("OUT") else e for e in extra]
    if "-o" not in extra:
        extra += ["-o", str(tmp_path / "out.jsonl")]
    code, err = run([str(path), "-i", str(source), "--field", "body", *extra], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("bertlite embed: error: ")
    assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_embedding_model_keeps_todays_vectors(
    real_model_path: Path, source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "vectors.npy"
    argv = [str(real_model_path), "-i", str(source), "--field", "body", "-o", str(out), "--dtype", "float32"]
    code, err = run(argv, capsys)
    assert code == 0, err
    assert err.startswith("embedded ")
    expected = SentenceTransformer(str(real_model_path), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5, rtol=0)
