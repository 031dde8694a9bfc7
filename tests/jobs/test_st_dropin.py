"""sentence-transformers code runs unchanged on bertlite.SentenceTransformer and bertlite.util.

The constructor's mapping (bertlite.jobs.st_compat) is checked against sentence-transformers' own rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sentence_transformers.util.misc import ORIGINAL_TRANSFORMER_MODELS as ST_ORIGINAL_MODELS

from bertlite.jobs.st_compat import (
    CROSS_ENCODER_ORGANIZATION,
    ORIGINAL_TRANSFORMER_MODELS,
    resolve_model_name,
    st_load_kwargs,
)

# --- the constructor's name and keywords (st_compat) --------------------------------


def test_original_transformer_models_are_sentence_transformers_list() -> None:
    assert ORIGINAL_TRANSFORMER_MODELS == set(ST_ORIGINAL_MODELS)


@pytest.mark.parametrize(
    ("name", "organization", "expected"),
    [
        ("all-MiniLM-L6-v2", "sentence-transformers", "sentence-transformers/all-MiniLM-L6-v2"),
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers", "sentence-transformers/all-MiniLM-L6-v2"),
        ("BAAI/bge-small-en-v1.5", "sentence-transformers", "BAAI/bge-small-en-v1.5"),
        ("bert-base-uncased", "sentence-transformers", "bert-base-uncased"),
        ("BERT-base-uncased", "sentence-transformers", "BERT-base-uncased"),
        ("ms-marco-MiniLM-L6-v2", CROSS_ENCODER_ORGANIZATION, "cross-encoder/ms-marco-MiniLM-L6-v2"),
        ("colbert-tiny", None, "colbert-tiny"),
    ],
)
def test_resolve_model_name(name: str, organization: str | None, expected: str) -> None:
    assert resolve_model_name(name, organization) == expected


def test_resolve_model_name_keeps_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model").mkdir()
    assert resolve_model_name("my-model") == "my-model"
    assert resolve_model_name(tmp_path / "my-model") == str(tmp_path / "my-model")


def test_resolve_model_name_refuses_a_file_and_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        resolve_model_name(tmp_path / "model.bin")
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_model_name("models/of/mine")


def test_st_load_kwargs_maps_the_hub_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENTENCE_TRANSFORMERS_HOME", raising=False)
    assert st_load_kwargs() == {
        "device": None,
        "revision": None,
        "cache_dir": None,
        "local_files_only": False,
        "token": None,
    }
    kwargs = st_load_kwargs(
        device="cpu", cache_folder="/c", revision="v1", local_files_only=True, token="t",
        model_kwargs={"torch_dtype": torch.bfloat16},
    )  # fmt: skip
    assert kwargs == {
        "device": "cpu",
        "revision": "v1",
        "cache_dir": "/c",
        "local_files_only": True,
        "token": "t",
        "dtype": torch.bfloat16,
    }
    assert st_load_kwargs(model_kwargs={"dtype": "float32"})["dtype"] == "float32"
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", "/st-home")
    assert st_load_kwargs()["cache_dir"] == "/st-home"
    assert st_load_kwargs(cache_folder="/mine")["cache_dir"] == "/mine"


def test_st_load_kwargs_device_map_names_the_device() -> None:
    assert st_load_kwargs(device="cpu", model_kwargs={"device_map": "cuda:1"})["device"] == "cuda:1"
    with pytest.raises(ValueError, match="runs a model on one device"):
        st_load_kwargs(model_kwargs={"device_map": "auto"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trust_remote_code": True}, "bertlite runs no code from a checkpoint"),
        ({"backend": "onnx"}, "runs on torch only"),
        ({"use_kernels": True}, "chooses its own kernels"),
        ({"processor_kwargs": {"model_max_length": 8}}, "takes no processor_kwargs"),
        ({"config_kwargs": {"hidden_dropout_prob": 0.0}}, "takes no config_kwargs"),
        ({"model_kwargs": {"attn_implementation": "sdpa", "low_cpu_mem_usage": True}}, "'attn_implementation'"),
        ({"model_kwargs": {"dtype": "float32", "torch_dtype": "float32"}}, "both 'dtype' and 'torch_dtype'"),
    ],
)
def test_st_load_kwargs_refuses_what_bertlite_lacks(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        st_load_kwargs(**kwargs)
