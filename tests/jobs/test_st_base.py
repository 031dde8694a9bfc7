"""bertlite.jobs.st.base: the one sentence-transformers base every job's constructor goes through.

The device rule is checked without a GPU: torch's availability checks are patched, and the load is stopped at
LoadOptions.check, where every job's loading checks the device first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import bertlite
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.st.base import STBase, default_device

JOBS = ["SentenceTransformer", "CrossEncoder", "SparseEncoder", "MultiVectorEncoder"]
ORGANIZATIONS = {
    "SentenceTransformer": "sentence-transformers",
    "CrossEncoder": "cross-encoder",
    "SparseEncoder": "sparse-encoder",
    "MultiVectorEncoder": None,
}


class Stop(Exception):
    """Raised where the load reads its device: nothing is loaded."""


def device_of(name: str, folder: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> str:
    """The device `bertlite.<name>(folder, **kwargs)` loads on."""
    seen = []

    def check(cls: type, quantize: Any, dtype: Any, device: Any, *args: Any) -> None:
        seen.append(device)
        raise Stop

    monkeypatch.setattr(LoadOptions, "check", classmethod(check))
    with pytest.raises(Stop):
        getattr(bertlite, name)(str(folder), **kwargs)
    return str(seen[0])


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")],
)
def test_device_none_is_sentence_transformers_rule_for_every_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool, expected: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert default_device() == expected
    assert {name: device_of(name, tmp_path, monkeypatch) for name in JOBS} == dict.fromkeys(JOBS, expected)
    # a device given wins, and model_kwargs' device_map wins over it, for every job alike
    assert {name: device_of(name, tmp_path, monkeypatch, device="cpu") for name in JOBS} == dict.fromkeys(JOBS, "cpu")
    mapped = {name: device_of(name, tmp_path, monkeypatch, model_kwargs={"device_map": "meta"}) for name in JOBS}
    assert mapped == dict.fromkeys(JOBS, "meta")


def test_device_none_is_the_cpu_on_this_machine_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert default_device() == "cpu"


def test_every_job_is_one_base_with_its_organization_as_a_class_attribute() -> None:
    for name in [*JOBS, "Embedder"]:
        job = getattr(bertlite, name)
        assert issubclass(job, STBase), name
        assert job.save is STBase.save and job.save_pretrained is STBase.save, name
    assert {name: getattr(bertlite, name).default_huggingface_organization for name in JOBS} == ORGANIZATIONS


def test_tokenize_is_one_contract_per_class(real_model_path: Path) -> None:
    """Embedder.tokenize gives its Encodings (encodings()); sentence-transformers' classes the padded inputs."""
    embedder = bertlite.Embedder.from_pretrained(real_model_path)
    encodings = embedder.tokenize(["a b", "c"])
    assert [e.ids for e in encodings] == [e.ids for e in embedder.encodings(["a b", "c"])]
    st = bertlite.SentenceTransformer(str(real_model_path), device="cpu")
    padded = st.tokenize(["a b", "c"])
    assert padded["input_ids"].shape == (2, max(len(e.ids) for e in encodings))
    assert type(st).tokenize is STBase.tokenize and type(embedder).tokenize is not STBase.tokenize
