"""Write a model as transformers' save_pretrained does: config.json and safetensors weights.

The keys are the model's own state_dict keys, which are transformers' (`bert.`
prefix for head classes, none for BertModel), so transformers loads the folder
with no missing or unexpected keys. Tied tensors are stored once, under the
embedding's name. Every file is written under a temporary name and renamed into
place only when all of them are complete, so a failed save leaves the folder as
it was.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from safetensors.torch import save_file
from torch import Tensor

from bertlite.config import CONFIG_NAME
from bertlite.loading import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME
from bertlite.modeling import BertPreTrainedModel

SHARD_NAME = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
# transformers' convert_file_size_to_int units (plus T); as there, "Kb", "Mb", "Gb" with a
# lowercase b are bits.
SIZE_UNITS = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
SIZE_UNITS |= {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as "5GB", "200KB", "1GiB" (transformers' units)."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    elif isinstance(size, str):
        match = re.fullmatch(r"\s*(\d+)\s*([KMGT]i?B)?\s*", size, flags=re.IGNORECASE)
        if match is None:
            raise ValueError(f"max_shard_size={size!r} is not a size (use bytes as an int, or e.g. '5GB', '200MB')")
        number, unit = match.groups()
        value = int(number) * (SIZE_UNITS[unit.upper()] if unit else 1)
        if unit and unit.endswith("b") and "i" not in unit.lower():
            value //= 8
    else:
        raise TypeError(f"max_shard_size must be an int or a string such as '5GB', got {type(size).__name__}")
    if value <= 0:
        raise ValueError(f"max_shard_size must be positive, got {size!r}")
    return value


def tensors_to_save(model: BertPreTrainedModel) -> dict[str, Tensor]:
    """The state_dict as it goes into the files: tied targets dropped, every tensor owning its storage.

    safetensors refuses tensors that share memory. A tied target is the source's tensor
    and is left out, as transformers does (loading ties it again). Any other sharing,
    such as the fast path's fused QKV buffer under query/key/value, is cut by a copy.
    """
    state = {key: value.detach() for key, value in model.state_dict().items()}
    meta = sorted(key for key, value in state.items() if value.is_meta)
    if meta:
        raise ValueError(f"cannot save weights that have no data (meta device): {', '.join(meta)}")
    for target, source in model.tied_weights_keys().items():
        if target in state and source in state and _same_tensor(state[target], state[source]):
            del state[target]
    seen_storage: set[tuple[str, int]] = set()
    for key, value in state.items():
        storage = (value.device.type, value.untyped_storage().data_ptr())
        owns_storage = value.untyped_storage().nbytes() == value.numel() * value.element_size()
        if storage in seen_storage or not owns_storage or not value.is_contiguous():
            value = state[key] = value.contiguous().clone()
            storage = (value.device.type, value.untyped_storage().data_ptr())
        seen_storage.add(storage)
    return state


def _same_tensor(a: Tensor, b: Tensor) -> bool:
    return (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and a.storage_offset() == b.storage_offset()
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def shard(state: dict[str, Tensor], max_bytes: int) -> list[dict[str, Tensor]]:
    """Split in state_dict order, starting a shard when the next tensor would not fit.
    A tensor larger than max_bytes gets a shard of its own, as in transformers."""
    shards: list[dict[str, Tensor]] = [{}]
    size = 0
    for key, value in state.items():
        nbytes = value.numel() * value.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = value
        size += nbytes
    return shards


def save_pretrained(
    model: BertPreTrainedModel, save_directory: str | os.PathLike, *, max_shard_size: int | str = "5GB"
) -> None:
    """Write config.json and model.safetensors (or model-0000i-of-0000n.safetensors and
    model.safetensors.index.json when the weights exceed max_shard_size) into save_directory.

    Weight files from an earlier save into the same folder are removed, so the folder
    never holds two checkpoints that a loader could mix up.
    """
    max_bytes = parse_size(max_shard_size)
    folder = Path(save_directory)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    state = tensors_to_save(model)
    shards = shard(state, max_bytes)
    files: dict[str, bytes | dict[str, Tensor]] = {}  # file name -> contents, in the order they go into place
    if len(shards) == 1:
        files[SAFE_WEIGHTS_NAME] = shards[0]
    else:
        names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
        files.update(zip(names, shards, strict=True))
        index = {
            "metadata": {
                "total_parameters": sum(v.numel() for v in state.values()),
                "total_size": sum(v.numel() * v.element_size() for v in state.values()),
            },
            "weight_map": {key: name for name, part in zip(names, shards, strict=True) for key in sorted(part)},
        }
        index["weight_map"] = dict(sorted(index["weight_map"].items()))
        files[SAFE_WEIGHTS_INDEX_NAME] = _json_bytes(index)
    files[CONFIG_NAME] = _json_bytes(_config_dict(model))
    _write_all(folder, files)


def _config_dict(model: BertPreTrainedModel) -> dict:
    config = model.config.to_dict()
    config["architectures"] = [type(model).__name__]
    dtypes = [p.dtype for p in model.parameters() if p.is_floating_point()]
    if dtypes:
        # transformers writes the weights' dtype, which dtype="auto" reads back.
        config["dtype"] = str(dtypes[0]).removeprefix("torch.")
        config.pop("torch_dtype", None)  # v4's name for it: one source of truth
    return dict(sorted(config.items()))


def _json_bytes(data: dict) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def _write_all(folder: Path, files: dict[str, bytes | dict[str, Tensor]]) -> None:
    temporary: dict[str, str] = {}
    try:
        for name, contents in files.items():
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
            temporary[name] = tmp
            with os.fdopen(fd, "wb") as f:
                if isinstance(contents, bytes):
                    f.write(contents)
            if isinstance(contents, dict):
                tensors = {key: value.to("cpu") for key, value in contents.items()}
                save_file(tensors, tmp, metadata={"format": "pt"})  # transformers checks the format tag
    except BaseException:
        for tmp in temporary.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    # Everything is written. Shards go into place first (new names hide nothing), then
    # stale weights go (an old model.safetensors would win over a new index), then the
    # index or the single file, then the config.
    shard_names = [name for name in files if SHARD_NAME.fullmatch(name)]
    for name in shard_names:
        os.replace(temporary.pop(name), folder / name)
    for old in folder.iterdir():
        stale = old.name in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME) or SHARD_NAME.fullmatch(old.name)
        if stale and old.name not in files:
            old.unlink()
    for name, tmp in temporary.items():
        os.replace(tmp, folder / name)
