"""`bertlite embed` on a BGE-M3 folder: its dense vectors (the default task), lexical weights (--task sparse) and
ColBERT vectors (--task multi-vector), each against FlagEmbedding's BGEM3FlagModel in the same run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertlite.cli import main
from tests.jobs.test_m3 import RTOL, write_m3_folder
from tests.serve_helpers import one_torch_thread  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.slow  # the CLI end to end, FlagEmbedding beside

TEXTS = ["the list of items", "sort a dict by value", "zebra", "json writes a new sequence " * 4, "key key value"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from FlagEmbedding import BGEM3FlagModel

    folder = write_m3_folder(tmp_path_factory.mktemp("m3-cli") / "bge-m3")
    model = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu", passage_max_length=40)
    return folder, model.encode(TEXTS, return_dense=True, return_sparse=True, return_colbert_vecs=True)


def run(folder: Path, tmp_path: Path, output: str, *task: str) -> Path:
    source = tmp_path / "in.txt"
    source.write_text("".join(t + "\n" for t in TEXTS))
    out = tmp_path / output
    argv = ["embed", str(folder), "-i", str(source), "-o", str(out), "--dtype", "float32", "--quiet", *task]
    assert main(argv) == 0
    return out


def test_dense_vectors_by_default(outputs: tuple[Path, dict], tmp_path: Path) -> None:
    folder, expected = outputs
    vectors = np.load(run(folder, tmp_path, "dense.npy"))
    np.testing.assert_allclose(vectors, expected["dense_vecs"], atol=1e-5, rtol=0)


def test_lexical_weights_with_task_sparse(outputs: tuple[Path, dict], tmp_path: Path) -> None:
    folder, expected = outputs
    rows = [
        json.loads(line) for line in run(folder, tmp_path, "sparse.jsonl", "--task", "sparse").read_text().splitlines()
    ]
    for row, weights in zip(rows, expected["lexical_weights"], strict=True):
        keys = sorted(weights, key=int)
        assert row["indices"] == [int(k) for k in keys]
        np.testing.assert_allclose(row["values"], [weights[k] for k in keys], atol=1e-5, rtol=RTOL)  # up to tens


def test_colbert_vectors_with_task_multi_vector(outputs: tuple[Path, dict], tmp_path: Path) -> None:
    folder, expected = outputs
    out = run(folder, tmp_path, "colbert.jsonl", "--task", "multi-vector")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for row, vectors in zip(rows, expected["colbert_vecs"], strict=True):
        np.testing.assert_allclose(np.asarray(row["embedding"]), vectors, atol=1e-5, rtol=0)
