"""Hub ids downloaded for real, from a local stand-in for the hub (tests/hub_server.py), and what each fault gives.

huggingface_hub copies HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_CACHE into
huggingface_hub.constants at import and reads the attributes at call time, so
the `hub` fixture (conftest.py) points those attributes at the server and a tmp cache. The
concurrency test runs real subprocesses, which get the same through their env.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import constants, file_download
from huggingface_hub.utils import _http as hf_http
from safetensors.torch import load_file

import bertlite
from bertlite.errors import CheckpointError, CheckpointNotFoundError, DownloadError, NotCachedError
from tests.helpers import REPO_ID, ROOT, assert_weights, checkpoint_files, make_hf_model
from tests.hub_server import HubServer, etag_of

WEIGHTS = "model.safetensors"


def repo_cache(hub_cache: Path, repo_id: str = REPO_ID) -> Path:
    return hub_cache / ("models--" + repo_id.replace("/", "--"))


def assert_nothing_cached(hub_cache: Path, filename: str, data: bytes, repo_id: str = REPO_ID) -> None:
    """No blob of the file, no snapshot entry for it, no temporary download left behind."""
    repo = repo_cache(hub_cache, repo_id)
    assert not (repo / "blobs" / etag_of(filename, data)).exists()
    assert list(repo.glob(f"snapshots/*/{filename}")) == []
    assert list(repo.glob("blobs/*.incomplete")) == []
    # Whatever blob is there is complete and true to its name (config.json, fetched before the fault).
    for blob in repo.glob("blobs/*"):
        assert etag_of("x.safetensors" if len(blob.name) == 64 else "x.json", blob.read_bytes()) == blob.name


@pytest.fixture
def files(tmp_path: Path) -> dict[str, bytes]:
    return checkpoint_files(0, tmp_path)


# --- downloads that work ----------------------------------------------------------------


def test_download_then_offline(
    hub: HubServer, hub_cache: Path, files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = hub.add_commit(REPO_ID, files)

    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=0)

    snapshot = repo_cache(hub_cache) / "snapshots" / commit
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", WEIGHTS]
    assert (repo_cache(hub_cache) / "refs" / "main").read_text() == commit
    assert hub.count("GET", WEIGHTS) == 1
    # The hub goes away: with no answer, huggingface_hub falls back to the cached snapshot of main...
    hub.stop()
    seen = len(hub.requests)
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=0)
    assert len(hub.requests) == seen  # really unreachable: no pooled connection got through
    # ...and so does offline mode, which never tries the network.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=0)
    with pytest.raises(NotCachedError, match="org/other: config.json is not in the Hugging Face cache"):
        bertlite.BertModel.from_pretrained("org/other")


def test_revision_pins_a_commit(hub: HubServer, tmp_path: Path) -> None:
    old = hub.add_commit(REPO_ID, checkpoint_files(1, tmp_path))
    new = hub.add_commit(REPO_ID, checkpoint_files(2, tmp_path))  # main moves here

    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID, revision=old), seed=1)
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=2)
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID, revision=new), seed=2)
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID, revision=old), seed=1)  # cached, not re-fetched
    assert hub.count("HEAD", f"/resolve/{old}/{WEIGHTS}") == 1


def test_connection_dropped_once_resumes(hub: HubServer, hub_cache: Path, files: dict[str, bytes]) -> None:
    hub.add_commit(REPO_ID, files)
    hub.fail(REPO_ID, WEIGHTS, "drop-once")

    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=0)

    assert hub.count("GET", WEIGHTS) == 2  # the cut one, and the resume from where it stopped


# --- faults -------------------------------------------------------------------------------


@dataclass
class Fault:
    """What goes wrong (`apply`), the error it must give, and how the hub is set right again (`fix`)."""

    apply: Callable[[HubServer, dict[str, bytes]], None]
    error: type[Exception]
    says: tuple[str, ...]  # fragments of the message besides the repo id and file name
    file: str = WEIGHTS  # the file the message must name and the cache must not hold
    fix: Callable[[HubServer, dict[str, bytes]], None] = lambda hub, files: hub.clear_faults()
    revision: str | None = None


def _set_gated(status: int | None) -> Callable[[HubServer, dict[str, bytes]], None]:
    def apply(hub: HubServer, files: dict[str, bytes]) -> None:
        hub.repos[REPO_ID].gated = status

    return apply


def _add_repo(hub: HubServer, files: dict[str, bytes]) -> None:
    hub.add_commit(REPO_ID, files)


LOGIN = ("`hf auth login`", "HF_TOKEN")
FAULT_CASES = {
    "repo-missing": Fault(
        apply=lambda hub, files: hub.repos.clear(),
        error=CheckpointNotFoundError,
        says=("no such repo", "HTTP 404", "check the repo id", *LOGIN),
        file="config.json",
        fix=_add_repo,
    ),
    "config-missing": Fault(
        apply=lambda hub, files: hub.add_commit(REPO_ID, {WEIGHTS: files[WEIGHTS]}),
        error=CheckpointNotFoundError,
        says=("no config.json found", "repo id, revision= and subfolder="),
        file="config.json",
        fix=_add_repo,
    ),
    "weights-missing": Fault(
        apply=lambda hub, files: hub.add_commit(REPO_ID, {"config.json": files["config.json"]}),
        error=CheckpointError,
        says=("no weights found", "pytorch_model.bin", "repo id, revision= and subfolder="),
        fix=_add_repo,
    ),
    "revision-missing": Fault(
        apply=lambda hub, files: None,
        error=CheckpointNotFoundError,
        says=("revision 'v2' not found", "check the branch, tag or commit hash"),
        file="config.json",
        fix=lambda hub, files: hub.repos[REPO_ID].branches.update(v2=hub.repos[REPO_ID].branches["main"]),
        revision="v2",
    ),
    "gated-401": Fault(
        apply=_set_gated(401),
        error=CheckpointNotFoundError,
        says=("gated", "HTTP 401", "request access", *LOGIN),
        file="config.json",
        fix=_set_gated(None),
    ),
    "gated-403": Fault(
        apply=_set_gated(403),
        error=CheckpointNotFoundError,
        says=("gated", "HTTP 403", "request access", *LOGIN),
        file="config.json",
        fix=_set_gated(None),
    ),
    "server-error": Fault(
        apply=lambda hub, files: hub.fail(REPO_ID, WEIGHTS, "server-error"),
        error=DownloadError,
        says=("HTTP 500", "retry later"),
    ),
    "server-error-on-download": Fault(
        apply=lambda hub, files: hub.fail(REPO_ID, WEIGHTS, "server-error-get"),
        error=DownloadError,
        says=("HTTP 500", "retry later"),
    ),
    "connection-dropped": Fault(
        apply=lambda hub, files: hub.fail(REPO_ID, WEIGHTS, "drop"),
        error=DownloadError,
        says=("peer closed connection", "partial file was discarded", "retry"),
    ),
    "wrong-size": Fault(
        apply=lambda hub, files: hub.fail(REPO_ID, WEIGHTS, "size"),
        error=DownloadError,
        says=("Consistency check failed", "partial file was discarded", "retry"),
    ),
    "wrong-content": Fault(
        apply=lambda hub, files: hub.fail(REPO_ID, WEIGHTS, "corrupt"),
        error=DownloadError,
        says=("does not match its hash", "removed from the cache", "retry"),
    ),
    "wrong-content-git-file": Fault(
        apply=lambda hub, files: hub.fail(REPO_ID, "config.json", "corrupt"),
        error=DownloadError,
        says=("does not match its hash", "removed from the cache", "retry"),
        file="config.json",
    ),
}


@pytest.mark.parametrize("case", FAULT_CASES.values(), ids=FAULT_CASES.keys())
def test_fault_gives_a_clear_error_and_caches_nothing(
    case: Fault, hub: HubServer, hub_cache: Path, files: dict[str, bytes]
) -> None:
    hub.add_commit(REPO_ID, files)
    case.apply(hub, files)

    with pytest.raises(case.error) as excinfo:
        bertlite.BertModel.from_pretrained(REPO_ID, revision=case.revision)

    message = str(excinfo.value)
    for fragment in (REPO_ID, case.file, *case.says):
        assert fragment in message, (fragment, message)
    assert "\n" not in message  # one line: the CLI prints it as is
    assert_nothing_cached(hub_cache, case.file, files[case.file])

    case.fix(hub, files)
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID, revision=case.revision), seed=0)


def test_hub_unreachable_and_nothing_cached(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with HubServer() as server:
        endpoint = server.endpoint  # a port nobody listens on once the server is gone
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    no_wait = SimpleNamespace(sleep=lambda seconds: None)
    monkeypatch.setattr(file_download, "time", no_wait)
    monkeypatch.setattr(hf_http, "time", no_wait)

    with pytest.raises(NotCachedError) as excinfo:
        bertlite.BertModel.from_pretrained(REPO_ID)

    # The hub errors are public, under the names users catch.
    assert bertlite.NotCachedError is NotCachedError and isinstance(excinfo.value, bertlite.CheckpointNotFoundError)
    assert issubclass(bertlite.DownloadError, bertlite.CheckpointNotFoundError)
    message = str(excinfo.value)
    for fragment in (REPO_ID, "config.json", f"the hub at {endpoint} cannot be reached", "HF_ENDPOINT", "retry"):
        assert fragment in message, (fragment, message)


# --- two processes, one empty cache -----------------------------------------------------

LOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    from safetensors.torch import save_file
    import bertlite

    model = bertlite.BertModel.from_pretrained(sys.argv[1])
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, sys.argv[2])
    """
)


@pytest.mark.slow
def test_two_processes_fill_one_cache(hub: HubServer, hub_cache: Path, files: dict[str, bytes], tmp_path: Path) -> None:
    commit = hub.add_commit(REPO_ID, files)
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.endpoint,
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("HF_TOKEN", None)
    outputs = [tmp_path / f"weights-{i}.safetensors" for i in range(2)]
    # No download of the weights completes before both processes have asked for them.
    with hub.hold_downloads(WEIGHTS, until_heads=2):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", LOAD_SCRIPT, REPO_ID, str(out)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for out in outputs
        ]
        try:
            results = [proc.communicate(timeout=120) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
    assert hub.count("HEAD", WEIGHTS) >= 2  # both really went to the hub...
    assert hub.hold_timeouts == 0  # ...and both were there before a download of the weights could finish
    first, second = (load_file(out) for out in outputs)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[key], second[key]) for key in first)
    reference = make_hf_model(seed=0).state_dict()
    assert all(torch.equal(first[key], reference[key]) for key in reference)
    repo = repo_cache(hub_cache)
    assert sorted(p.name for p in (repo / "snapshots" / commit).iterdir()) == ["config.json", WEIGHTS]
    assert sorted(p.name for p in (repo / "blobs").iterdir()) == sorted(etag_of(n, d) for n, d in files.items())
    assert json.loads((repo / "snapshots" / commit / "config.json").read_text())["hidden_size"] == 32


# --- more shapes of a hub checkpoint ------------------------------------------------------


@pytest.mark.slow
def test_sharded_checkpoint_and_a_missing_shard(hub: HubServer, tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    make_hf_model(seed=0).save_pretrained(folder, max_shard_size="20KB")
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    shards = sorted(name for name in files if name.endswith(".safetensors"))
    assert len(shards) > 2 and "model.safetensors.index.json" in files
    hub.add_commit(REPO_ID, files)
    hub.add_commit("org/incomplete", {name: data for name, data in files.items() if name != shards[-1]})

    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=0)
    with pytest.raises(CheckpointError) as excinfo:
        bertlite.BertModel.from_pretrained("org/incomplete")

    assert str(excinfo.value) == (
        f"org/incomplete: model.safetensors.index.json names shard '{shards[-1]}', which does not exist "
        "(an incomplete upload or copy?)"
    )


def test_cli_shows_a_hub_error_on_one_line(
    hub: HubServer, files: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bertlite.cli import main

    hub.add_commit(REPO_ID, files)
    hub.repos[REPO_ID].gated = 401
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out.npy"

    code = main(["embed", REPO_ID, "-i", str(tmp_path / "in.txt"), "-o", str(out)])

    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"bertlite embed: error: {REPO_ID}: cannot download ") and "the repo is gated" in err
    assert "`hf auth login`" in err and not out.exists()


def test_force_download_is_checked_too(hub: HubServer, hub_cache: Path, files: dict[str, bytes]) -> None:
    hub.add_commit(REPO_ID, files)
    bertlite.BertModel.from_pretrained(REPO_ID)
    hub.fail(REPO_ID, WEIGHTS, "corrupt")

    # The blob is cached already; force_download fetches it again and must not trust the new bytes.
    with pytest.raises(DownloadError, match=f"{REPO_ID}: the downloaded {WEIGHTS} does not match its hash"):
        bertlite.BertModel.from_pretrained(REPO_ID, force_download=True)

    assert_nothing_cached(hub_cache, WEIGHTS, files[WEIGHTS])
    hub.clear_faults()
    assert_weights(bertlite.BertModel.from_pretrained(REPO_ID), seed=0)


@pytest.mark.slow
def test_embed_cli_from_the_hub_matches_the_folder(
    hub: HubServer, real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The whole sentence-transformers repo (tokenizer, pooling config in 1_Pooling/), served as the hub serves it.
    import numpy as np

    from bertlite.cli import main

    paths = [p for p in real_model_path.rglob("*") if p.is_file()]
    files = {p.relative_to(real_model_path).as_posix(): p.read_bytes() for p in paths}
    assert "1_Pooling/config.json" in files and "tokenizer.json" in files
    hub.add_commit("sentence-transformers/all-MiniLM-L6-v2", files)
    (tmp_path / "in.txt").write_text("The hub serves this model.\nA second line.\n")
    vectors = {}
    for source in ("sentence-transformers/all-MiniLM-L6-v2", str(real_model_path)):
        out = tmp_path / f"{len(vectors)}.npy"
        code = main(["embed", source, "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet"])
        assert code == 0, capsys.readouterr().err
        vectors[source] = np.load(out)

    hub_vectors, folder_vectors = vectors.values()
    np.testing.assert_array_equal(hub_vectors, folder_vectors)
    assert hub.count("HEAD", "1_Pooling/config.json") == 1  # the pooling settings came from the hub too


def test_token_true_without_a_stored_token(hub: HubServer, files: dict[str, bytes]) -> None:
    from huggingface_hub.utils import LocalTokenNotFoundError

    hub.add_commit(REPO_ID, files)
    # Not a download failure: huggingface_hub's own error, which says how to log in, comes through as it is.
    with pytest.raises(LocalTokenNotFoundError, match="hf auth login"):
        bertlite.BertModel.from_pretrained(REPO_ID, token=True)
    assert hub.requests == []  # refused before anything was sent
