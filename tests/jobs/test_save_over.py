"""save() into a folder an earlier save of another model wrote: the job files it does not write go (BGE-M3's head
files, module folders no longer named), files a save does not write stay, and a save that fails midway leaves
the old folder's files in place."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import bertlite
from bertlite.jobs import st
from bertlite.jobs.kinds import detect_kind
from tests.helpers import (
    COLBERT_OPTIONS,
    bert_m3_folder,
    colbert_folder,
    cross_encoder_folder,
    masked_lm_folder,
    splade_folder,
)

PINNED = {"model_kwargs": {"dtype": torch.float32}, "device": "cpu"}
TEXTS = ["a short text", "another text about the weather"]


@pytest.fixture(scope="module")
def sources(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("save-over")
    return {
        "embedding": real_model_path,
        "cross-encoder": cross_encoder_folder(real_model_path, root / "ce", num_labels=1),
        "sparse": splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade"),
        "multi-vector": colbert_folder(real_model_path, root / "cb", **COLBERT_OPTIONS),
    }


# Each kind: how to load it from a folder, and what it gives for TEXTS (compared after a save and a reload).
LOADERS: dict[str, Callable[[Path], Any]] = {
    "embedding": lambda path: bertlite.SentenceTransformer(str(path), **PINNED),
    "cross-encoder": lambda path: bertlite.CrossEncoder(str(path), **PINNED),
    "sparse": lambda path: bertlite.SparseEncoder(str(path), **PINNED),
    "multi-vector": lambda path: bertlite.MultiVectorEncoder(str(path), **PINNED),
}
OUTPUTS: dict[str, Callable[[Any], Any]] = {
    "embedding": lambda job: job.encode(TEXTS),
    "cross-encoder": lambda job: job.predict([(TEXTS[0], TEXTS[1])]),
    "sparse": lambda job: job.encode(TEXTS).to_dense().numpy(),
    "multi-vector": lambda job: np.concatenate([v.numpy() for v in job.encode_document(TEXTS)]),
}


@pytest.mark.parametrize("kind", list(LOADERS))
def test_a_save_over_a_bge_m3_folder_no_longer_reads_as_bge_m3(
    sources: dict[str, Path], real_model_path: Path, tmp_path: Path, kind: str
) -> None:
    folder = bert_m3_folder(real_model_path, tmp_path / "bge-m3")
    assert detect_kind(folder) == "m3"
    (folder / "notes.txt").write_text("mine")
    job = LOADERS[kind](sources[kind])
    job.save(str(folder))
    assert not (folder / "colbert_linear.pt").exists() and not (folder / "sparse_linear.pt").exists()
    assert (folder / "notes.txt").read_text() == "mine"  # not a file a save writes: kept
    assert detect_kind(folder) == kind
    np.testing.assert_allclose(OUTPUTS[kind](LOADERS[kind](folder)), OUTPUTS[kind](job), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("first", "then"), [("multi-vector", "embedding"), ("embedding", "sparse")])
def test_module_folders_an_earlier_save_named_go(
    sources: dict[str, Path], tmp_path: Path, first: str, then: str
) -> None:
    LOADERS[first](sources[first]).save(str(tmp_path))
    old = sorted(path.name for path in tmp_path.iterdir() if path.is_dir())
    (tmp_path / old[0] / "user.txt").write_text("mine")  # a file no save writes, in an old module folder
    job = LOADERS[then](sources[then])
    job.save(str(tmp_path))
    new = {module["path"] for module in json.loads((tmp_path / "modules.json").read_text())} - {""}
    assert not set(old) <= new  # the test needs a folder the new save does not name
    assert {path.name for path in tmp_path.iterdir() if path.is_dir()} == new | {old[0]}
    if old[0] not in new:
        assert [path.name for path in (tmp_path / old[0]).iterdir()] == ["user.txt"]
    assert detect_kind(tmp_path) == then
    np.testing.assert_allclose(OUTPUTS[then](LOADERS[then](tmp_path)), OUTPUTS[then](job), rtol=1e-6, atol=1e-6)


def test_a_module_saved_in_the_other_format_leaves_no_old_weights(sources: dict[str, Path], tmp_path: Path) -> None:
    job = LOADERS["multi-vector"](sources["multi-vector"])
    job.save(str(tmp_path), safe_serialization=False)
    dense = next(p for p in tmp_path.iterdir() if p.name.endswith("_Dense"))
    assert (dense / "pytorch_model.bin").exists()
    job.save(str(tmp_path))
    assert sorted(p.name for p in dense.iterdir()) == ["config.json", "model.safetensors"]


def test_a_save_that_fails_midway_removes_nothing(
    sources: dict[str, Path], real_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = bert_m3_folder(real_model_path, tmp_path / "bge-m3")
    LOADERS["multi-vector"](sources["multi-vector"]).save(str(folder))
    bert_m3_folder(real_model_path, tmp_path / "heads")
    for name in ("colbert_linear.pt", "sparse_linear.pt"):
        (folder / name).write_bytes((tmp_path / "heads" / name).read_bytes())
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    write_json = st.base._write_json

    def failing(path: Path, data: Any) -> None:
        if path.name == "config_sentence_transformers.json":
            raise OSError(28, "No space left on device")
        write_json(path, data)

    monkeypatch.setattr(st.base, "_write_json", failing)
    with pytest.raises(OSError, match="No space left"):
        LOADERS["embedding"](sources["embedding"]).save(str(folder))
    after = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    assert set(before) <= set(after), set(before) - set(after)
