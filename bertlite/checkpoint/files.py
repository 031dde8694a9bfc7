"""Finding a checkpoint's weight files and reading their tensors.

The weight files are found in the preferred format (safetensors never runs code, so it wins), a shard
index is read and its shards found; each file is read one tensor at a time, a .bin only with
torch.load(weights_only=True) after safety.py's checks. Nothing here knows the model.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from bertlite.checkpoint.safety import check_bin_file, check_shard_name, unpickler_detail, without_unsafe_advice
from bertlite.errors import CheckpointError, NotCachedError, WeightsNotFoundError
from bertlite.hub import resolve_file

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_NAME = "pytorch_model.bin"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
# Preference order: safetensors never runs code, so it wins when both exist.
WEIGHTS_CANDIDATES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)


def resolve_weight_files(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> list[Path]:
    """Find the weight files of a checkpoint, in the preferred format (WEIGHTS_CANDIDATES' order).

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, subfolder, ...).

    Returns:
        The local paths: one file, or every shard a shard index names.

    Raises:
        CheckpointError: no weights found, an invalid shard index, or a shard missing.
        NotCachedError: offline, and the preferred file is not in the cache.
    """
    not_cached: NotCachedError | None = None
    for name in WEIGHTS_CANDIDATES:
        try:
            path = resolve_file(name_or_path, name, **hub_kwargs)
        except NotCachedError as e:
            not_cached = not_cached or e  # the preferred format's file is the one to name
            continue
        if path is None:
            continue
        if name.endswith(".index.json"):
            return [_resolve_shard(name_or_path, path, shard, hub_kwargs) for shard in _read_index(path)]
        return [path]
    if not_cached is not None:
        raise not_cached
    raise WeightsNotFoundError(
        f"{name_or_path}: no weights found (looked for {', '.join(WEIGHTS_CANDIDATES)}); "
        "check the folder or repo id, revision= and subfolder="
    )


def _read_index(path: Path) -> list[str]:
    """The shard file names of an index, each checked to be a file of the index's own folder."""
    try:
        weight_map = json.loads(path.read_text(encoding="utf-8"))["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a valid shard index (needs a 'weight_map' object): {e!r}") from e
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{path}: 'weight_map' must map tensor names to shard files, got {weight_map!r:.80}")
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(f"{path}: weight_map[{key!r}] must be a shard file name (a string), got {shard!r}")
    shards = list(dict.fromkeys(weight_map.values()))
    for shard in shards:
        check_shard_name(path, shard)
    return shards


def _resolve_shard(name_or_path: str | os.PathLike, index: Path, shard: str, hub_kwargs: dict) -> Path:
    subfolder = hub_kwargs.get("subfolder", "")
    path = resolve_file(name_or_path, shard, **hub_kwargs)
    if path is None:
        # Named from the checkpoint, not the cache path, so a hub id reads as the user wrote it.
        raise CheckpointError(
            f"{name_or_path}: {index.name} names shard {os.path.join(subfolder, shard)!r}, which does not exist "
            "(an incomplete upload or copy?)"
        )
    return path


def iter_tensors(path: Path) -> Iterator[tuple[str, Tensor]]:
    """Read one weight file (safetensors or .bin, weights only), one tensor at a time.

    Args:
        path: the file.

    Yields:
        (key, tensor) pairs, on the CPU.

    Raises:
        CheckpointError: the file is corrupt, not a checkpoint, or holds pickled objects other than tensors.
    """
    if path.suffix == ".safetensors":
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                for key in f.keys():
                    yield key, f.get_tensor(key)
        except SafetensorError as e:
            raise CheckpointError(
                f"{path}: not a valid safetensors file ({e}); it is truncated or corrupt: download or convert it again"
                " (from the hub: force_download=True)"
            ) from e
    else:
        yield from _load_bin(path).items()


def _load_bin(path: Path) -> dict[str, Tensor]:
    # weights_only=True is the whole point: a pickle can run arbitrary code, and
    # this unpickler accepts tensors and plain containers only.
    zipped = check_bin_file(path)
    try:
        # Pre-zip (torch < 1.6) files cannot be memory-mapped.
        state_dict = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError as e:
        detail = unpickler_detail(e)
        if "GLOBAL" not in detail.upper():
            raise CheckpointError(f"{path}: not a PyTorch checkpoint (unpickling failed: {detail})") from e
        raise CheckpointError(
            f"{path}: refused to load; it holds pickled objects other than tensors, which could run code "
            f"(bertlite reads .bin files only with torch.load(weights_only=True)): {detail.rstrip('.')}. "
            "Convert it to safetensors with a tool you trust, or use a checkpoint from a trusted source"
        ) from e
    except (RuntimeError, ValueError, OSError, EOFError, KeyError, IndexError, zipfile.BadZipFile) as e:
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint ({type(e).__name__}: {without_unsafe_advice(e)})"
        ) from e
    if not isinstance(state_dict, dict):
        raise CheckpointError(f"{path}: expected a dict of tensors, got {type(state_dict).__name__}")
    for key, value in state_dict.items():
        if not isinstance(value, Tensor):
            raise CheckpointError(
                f"{path}: expected a dict of tensors, but {key!r} is a {type(value).__name__} "
                "(a training checkpoint? save model.state_dict() instead)"
            )
    return state_dict


# The pickle of a state dict takes ~200 bytes per tensor (its name and how to rebuild it). Its size bounds


def checkpoint_keys(path: Path) -> Iterable[str] | None:
    """A weight file's tensor names without reading its tensors; None where that is not cheap.

    For a zip .bin: the `encoder.layer.N.` (DistilBERT's `transformer.layer.N.`, ModernBERT's `layers.N.`) prefixes
    in its pickle's bytes (of its keys, and of the module names torch saves with a state dict), found by a regex in
    about a millisecond; unpickling would cost as much as the load itself.

    Args:
        path: a weight file.

    Returns:
        Its keys (for a zip .bin, their `encoder.layer.N.` prefixes), or None for a pre-zip .bin, an
        unreadable safetensors file or an odd zip, which the load itself reports.
    """
    if path.suffix == ".safetensors":
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                return list(f.keys())
        except SafetensorError:
            return None  # iter_tensors reports the file as it reads it
    if not check_bin_file(path):
        return None
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            return None  # torch.load reports it
        raw = archive.read(pickles[0])  # bounded by check_bin_file
    return [name.decode() for name in re.findall(rb"(?:(?:encoder|transformer)\.layer|layers)\.\d+\.", raw)]
