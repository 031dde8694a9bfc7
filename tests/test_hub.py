"""Hub ids are resolved through huggingface_hub, from a cache these tests build by hand.

Each test writes a Hugging Face hub cache under tmp_path, in the layout
huggingface_hub itself writes:

    <cache>/models--org--tiny-bert/
        blobs/<sha256>                     file contents
        refs/main                          a commit hash (no trailing newline)
        snapshots/<commit>/<file>          relative symlink -> ../../blobs/<sha256>

and then loads "org/tiny-bert" with the hub in offline mode, so every answer
comes from that cache and nothing is ever fetched from the network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub import constants as hf_constants
from torch import Tensor

import bertlite
from bertlite.errors import CheckpointNotFoundError, NotCachedError
from bertlite.hub import resolve_file

REPO_ID = "org/tiny-bert"
# Commit ids only need to look like git's (40 lowercase hex): huggingface_hub
# treats a revision matching [0-9a-f]{40} as a pinned commit, anything else as a ref.
COMMIT_MAIN = hashlib.sha1(b"tiny-bert main").hexdigest()
COMMIT_OLD = hashlib.sha1(b"tiny-bert old").hexdigest()

# A padded batch: the second row ends in two pad tokens (pad_token_id=0) that the
# mask hides, so the comparison also covers the attention mask path.
INPUT_IDS = torch.tensor([[2, 15, 42, 7, 3], [2, 88, 3, 0, 0]])
ATTENTION_MASK = (INPUT_IDS != 0).long()


# --- building the cache ---------------------------------------------------------


def tiny_transformers_bert(seed: int, num_hidden_layers: int = 2) -> transformers.BertModel:
    """A random transformers BertModel, small enough to build and run in milliseconds."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        intermediate_size=37,
        # Eager is transformers' reference attention; bertlite is compared against it.
        attn_implementation="eager",
    )
    model = transformers.BertModel(config)
    # Init leaves LayerNorms at 1/0 and biases at 0 in every seed; redraw all tensors so
    # each one differs between seeds and a tensor loaded from the wrong place shows.
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3)
    return model.eval()


def save_checkpoint(model: transformers.BertModel, folder: Path) -> Path:
    """save_pretrained into `folder` (config.json + model.safetensors), as a hub repo would hold it."""
    model.save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    return folder


def repo_cache(hub_cache: Path, repo_id: str = REPO_ID) -> Path:
    # huggingface_hub's folder naming: "models--" + repo id with "/" -> "--".
    return hub_cache / ("models--" + repo_id.replace("/", "--"))


def add_snapshot(
    hub_cache: Path, commit: str, checkpoint: Path, *, subfolder: str = "", repo_id: str = REPO_ID
) -> Path:
    """Put the files of `checkpoint` in the cache as snapshot `commit` (under `subfolder`).

    Contents go to blobs/ and the snapshot holds relative symlinks to them, which
    is what hf_hub_download writes itself. Its offline lookup only checks that
    snapshots/<commit>/<path> exists, so blob names are not verified: a sha256 of
    the contents (the etag of an LFS file) is used for every file.
    """
    repo = repo_cache(hub_cache, repo_id)
    snapshot = repo / "snapshots" / commit / subfolder
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for src in sorted(checkpoint.iterdir()):
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / src.name).symlink_to(os.path.relpath(blob, snapshot))
    return repo / "snapshots" / commit


def set_ref(hub_cache: Path, commit: str, ref: str = "main", repo_id: str = REPO_ID) -> None:
    refs = repo_cache(hub_cache, repo_id) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    # No trailing newline: huggingface_hub reads the ref with f.read() and does not
    # strip it, so "abc...\n" would name a snapshot folder that does not exist.
    (refs / ref).write_text(commit, encoding="utf-8")


def build_repo(hub_cache: Path, tmp_path: Path, model: transformers.BertModel, commit: str = COMMIT_MAIN) -> Path:
    """The common case: one commit holding `model` at the repo root, with refs/main pointing to it."""
    checkpoint = save_checkpoint(model, tmp_path / f"checkpoint-{commit[:8]}")
    snapshot = add_snapshot(hub_cache, commit, checkpoint)
    set_ref(hub_cache, commit)
    # The cache must be all the loader needs: the saved folder is gone.
    shutil.rmtree(checkpoint)
    return snapshot


# --- running the models ---------------------------------------------------------


@torch.no_grad()
def transformers_outputs(model: transformers.BertModel) -> tuple[Tensor, Tensor]:
    out = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK)
    return out.last_hidden_state, out.pooler_output


@torch.no_grad()
def bertlite_outputs(model: bertlite.BertModel) -> tuple[Tensor, Tensor]:
    out = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK)
    return out.last_hidden_state, out.pooler_output


def assert_same_outputs(model: bertlite.BertModel, reference: transformers.BertModel) -> None:
    for got, want in zip(bertlite_outputs(model), transformers_outputs(reference), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# --- fixtures -------------------------------------------------------------------


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline mode for every test: answers must come from the cache, and a test can never reach the network.

    huggingface_hub reads HF_HUB_OFFLINE once, into huggingface_hub.constants, when it
    is first imported (long before this fixture runs). Its HTTP hook then asks
    constants.is_offline_mode() on each request, which returns that module attribute,
    so the attribute is what must be patched. The env var is set as well for
    anything that reads the environment directly.
    """
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert hf_constants.is_offline_mode()


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    path = tmp_path / "hub"
    path.mkdir()
    return path


@pytest.fixture
def cache_from_env(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make `hub_cache` the default hub cache, the way a user would: HF_HUB_CACHE.

    As with HF_HUB_OFFLINE, huggingface_hub copies HF_HUB_CACHE into
    huggingface_hub.constants at import; hf_hub_download falls back to
    constants.HF_HUB_CACHE at call time when cache_dir is None, so patching the
    attribute is what takes effect in this already-running process.
    """
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(hub_cache))
    return hub_cache


# --- tests ----------------------------------------------------------------------


def test_hub_id_loads_from_cache_dir(hub_cache: Path, tmp_path: Path) -> None:
    reference = tiny_transformers_bert(seed=0)
    build_repo(hub_cache, tmp_path, reference)

    model = bertlite.BertModel.from_pretrained(REPO_ID, cache_dir=hub_cache)

    assert_same_outputs(model, reference)
    # The file really came from the snapshot refs/main names. hf_hub_download
    # returns the snapshot path (not the blob) under the resolved cache_dir.
    expected = repo_cache(hub_cache.resolve()) / "snapshots" / COMMIT_MAIN / "model.safetensors"
    assert resolve_file(REPO_ID, "model.safetensors", cache_dir=hub_cache) == expected


def test_hub_id_loads_from_hf_hub_cache_env(cache_from_env: Path, tmp_path: Path) -> None:
    reference = tiny_transformers_bert(seed=0)
    build_repo(cache_from_env, tmp_path, reference)

    # No cache_dir: huggingface_hub must find the cache through HF_HUB_CACHE.
    model = bertlite.BertModel.from_pretrained(REPO_ID)

    assert_same_outputs(model, reference)


def test_revision_selects_the_pinned_snapshot(hub_cache: Path, tmp_path: Path) -> None:
    main_reference = tiny_transformers_bert(seed=0)
    old_reference = tiny_transformers_bert(seed=1)
    build_repo(hub_cache, tmp_path, main_reference, commit=COMMIT_MAIN)
    # A second commit that no ref points to: only revision=<its hash> can reach it.
    add_snapshot(hub_cache, COMMIT_OLD, save_checkpoint(old_reference, tmp_path / "old"))

    default = bertlite.BertModel.from_pretrained(REPO_ID, cache_dir=hub_cache)
    pinned_main = bertlite.BertModel.from_pretrained(REPO_ID, cache_dir=hub_cache, revision=COMMIT_MAIN)
    pinned_old = bertlite.BertModel.from_pretrained(REPO_ID, cache_dir=hub_cache, revision=COMMIT_OLD)

    assert_same_outputs(default, main_reference)
    assert_same_outputs(pinned_main, main_reference)
    assert_same_outputs(pinned_old, old_reference)
    # Different seeds give different weights, so the revision visibly changes the answer.
    assert not torch.allclose(bertlite_outputs(pinned_old)[0], bertlite_outputs(default)[0], atol=1e-3)


@pytest.mark.parametrize(
    ("repo_id", "revision"),
    [
        pytest.param("org/not-downloaded", None, id="repo-not-cached"),
        pytest.param(REPO_ID, hashlib.sha1(b"never fetched").hexdigest(), id="commit-not-cached"),
    ],
)
def test_not_cached_while_offline_raises(hub_cache: Path, tmp_path: Path, repo_id: str, revision: str | None) -> None:
    # The cache exists and holds another checkpoint: the miss is about this repo/revision only.
    build_repo(hub_cache, tmp_path, tiny_transformers_bert(seed=0))

    with pytest.raises(NotCachedError) as excinfo:
        bertlite.BertModel.from_pretrained(repo_id, cache_dir=hub_cache, revision=revision)

    # Callers catching the generic errors (OSError, as transformers raises) see it too.
    assert isinstance(excinfo.value, CheckpointNotFoundError)
    assert isinstance(excinfo.value, OSError)
    message = str(excinfo.value)
    assert repo_id in message
    assert "not in the Hugging Face cache" in message
    assert "HF_HUB_OFFLINE" in message


def test_config_from_hub_id(hub_cache: Path, tmp_path: Path) -> None:
    build_repo(hub_cache, tmp_path, tiny_transformers_bert(seed=0))

    config = bertlite.BertConfig.from_pretrained(REPO_ID, cache_dir=hub_cache)

    assert config.hidden_size == 32
    assert config.num_hidden_layers == 2
    assert config.vocab_size == 99


def test_subfolder_checkpoint(hub_cache: Path, tmp_path: Path) -> None:
    root_reference = tiny_transformers_bert(seed=0)
    # A different shape (one layer) in the subfolder, so loading the root config or
    # weights by mistake fails loudly instead of passing by accident.
    sub_reference = tiny_transformers_bert(seed=1, num_hidden_layers=1)
    build_repo(hub_cache, tmp_path, root_reference)
    add_snapshot(hub_cache, COMMIT_MAIN, save_checkpoint(sub_reference, tmp_path / "sub"), subfolder="encoder")

    model = bertlite.BertModel.from_pretrained(REPO_ID, cache_dir=hub_cache, subfolder="encoder")

    assert model.config.num_hidden_layers == 1
    assert_same_outputs(model, sub_reference)
