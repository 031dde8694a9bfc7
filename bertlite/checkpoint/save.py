"""Write a model as transformers' save_pretrained does: config.json and safetensors (or .bin) weights.

The keys are the model's own state_dict keys, which are transformers' (`bert.`
prefix for head classes, none for BertModel), so transformers loads the folder
with no missing or unexpected keys. Tied tensors are stored once, under the
embedding's name. Every file is written under a temporary name and renamed into
place only when all of them are complete, so a failed save leaves the folder as
it was.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from torch import Tensor

from bertlite.checkpoint.files import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from bertlite.checkpoint.remap import fused_key
from bertlite.config import CONFIG_NAME
from bertlite.utils.files import write_temporaries

if TYPE_CHECKING:
    from bertlite.models.bert import BertPreTrainedModel

SHARD_NAME = re.compile(r"(model-\d{5}-of-\d{5}\.safetensors|pytorch_model-\d{5}-of-\d{5}\.bin)")
WEIGHT_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
# transformers' convert_file_size_to_int units (plus T); as there, "Kb", "Mb", "Gb" with a
# lowercase b are bits.
SIZE_UNITS = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
SIZE_UNITS |= {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def parse_size(size: int | str) -> int:
    """Parse a shard size as transformers does.

    Args:
        size: bytes as an int, or a string such as "5GB", "200KB", "1GiB" (transformers' units; a
            lower-case "b" means bits).

    Returns:
        The size in bytes.

    Raises:
        ValueError: not a size, or not positive.
        TypeError: neither an int nor a string.
    """
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


def tensors_to_save(model: BertPreTrainedModel, state_dict: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """Prepare a state_dict as it goes into the files: tied targets dropped, the Linears a checkpoint fuses
    concatenated back (fuse_linears), every tensor owning its storage.

    safetensors refuses tensors that share memory. A tied target is the source's tensor
    and is left out, as transformers does (loading ties it again). Any other sharing (a
    state_dict of views, a tensor that is a slice of a larger buffer) is cut by a copy.

    Args:
        model: the model, whose tied_weights_keys() say which targets to drop.
        state_dict: the tensors to save; None: the model's state_dict().

    Returns:
        The detached tensors by key.

    Raises:
        TypeError: a value of state_dict is not a tensor.
        ValueError: a tensor is on the meta device (has no data).
    """
    source = model.state_dict() if state_dict is None else state_dict
    for key, value in source.items():
        if not isinstance(value, Tensor):
            raise TypeError(f"state_dict[{key!r}] is a {type(value).__name__}, not a tensor")
    state = {key: value.detach() for key, value in source.items()}
    meta = sorted(key for key, value in state.items() if value.is_meta)
    if meta:
        raise ValueError(f"cannot save weights that have no data (meta device): {', '.join(meta)}")
    for target, source_key in model.tied_weights_keys().items():
        if target in state and source_key in state and _is_tied_copy(model, state, target, source_key):
            del state[target]
    state = fuse_linears(state, model.base_model_prefix)
    seen_storage: set[tuple[str, int]] = set()
    for key, value in state.items():
        storage = (value.device.type, value.untyped_storage().data_ptr())
        owns_storage = value.untyped_storage().nbytes() == value.numel() * value.element_size()
        if storage in seen_storage or not owns_storage or not value.is_contiguous():
            value = state[key] = value.contiguous().clone()
            storage = (value.device.type, value.untyped_storage().data_ptr())
        seen_storage.add(storage)
    return state


def fuse_linears(state: dict[str, Tensor], base_model_prefix: str) -> dict[str, Tensor]:
    """A state_dict in its checkpoint's layout: the parts of each Linear the checkpoints fuse (remap.FUSED_LINEARS:
    GTE's q_proj, k_proj, v_proj) as the one fused tensor (qkv_proj), their rows stacked in order.

    Args:
        state: a model's tensors by key.
        base_model_prefix: the family's.

    Returns:
        A new dict, each fused tensor where its first part was; parts given without all the others stay as they are.
    """
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        fused = fused_key(key, base_model_prefix)
        if fused is None or not all(part in state for part in fused[1]):
            out[key] = value
        elif key == fused[1][0]:
            out[fused[0]] = torch.cat([state[part] for part in fused[1]])
    return out


def _is_tied_copy(model: BertPreTrainedModel, state: dict[str, Tensor], target: str, source: str) -> bool:
    """Whether state[target] is the tied source's tensor: the same one, or (model.state_dict() gives the
    target a copy) an equal one while the model ties the two."""
    if _same_tensor(state[target], state[source]):
        return True
    tied = model.get_parameter(target) is model.get_parameter(source)
    return tied and state[target].shape == state[source].shape and torch.equal(state[target], state[source])


def _same_tensor(a: Tensor, b: Tensor) -> bool:
    return (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and a.storage_offset() == b.storage_offset()
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def save_pretrained(
    model: BertPreTrainedModel,
    save_directory: str | os.PathLike,
    *,
    is_main_process: bool = True,
    state_dict: dict[str, Tensor] | None = None,
    safe_serialization: bool = True,
    max_shard_size: int | str = "50GB",
    push_to_hub: bool = False,
    token: str | bool | None = None,
    **hub_kwargs: Any,
) -> None:
    """Write config.json and the weights into save_directory, as transformers' save_pretrained does.

    Weight files from an earlier save into the same folder, of either format, are removed, so the folder
    never holds two checkpoints that a loader could mix up.

    Args:
        model: the model to save (not an int8-quantized one).
        save_directory: the folder, created if needed.
        is_main_process: False writes nothing (the other ranks of a distributed run).
        state_dict: save these tensors instead of the model's (tied targets that share the source's
            storage are left out); None: the model's.
        safe_serialization: True writes model.safetensors; False pytorch_model.bin (torch.save).
        max_shard_size: beyond it (transformers v5's default, 50GB), numbered shards and an index; an
            int of bytes or a string such as "5GB" (parse_size).
        push_to_hub: then upload the folder with huggingface_hub.
        token: the hub token, for both.
        **hub_kwargs: with push_to_hub only: repo_id (default: the folder's name), commit_message,
            private, revision, create_pr.

    Raises:
        ValueError: an int8-quantized model, a bad max_shard_size, or save_directory is a file.
        TypeError: an unknown keyword, or hub keywords without push_to_hub.
    """
    _check_save_arguments(model, push_to_hub, hub_kwargs)
    if not is_main_process:
        return
    max_bytes = parse_size(max_shard_size)
    folder = Path(save_directory)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    files = _weight_files(tensors_to_save(model, state_dict), safe_serialization, max_bytes)
    files[CONFIG_NAME] = _json_bytes(_config_dict(model))
    _write_all(folder, files)
    if push_to_hub:
        push_folder(folder, token=token, default_repo_id=folder.resolve().name, **hub_kwargs)


def _check_save_arguments(model: BertPreTrainedModel, push_to_hub: bool, hub_kwargs: dict[str, Any]) -> None:
    """Refuse what save_pretrained cannot do, before anything is written.

    Args:
        model: the model to save.
        push_to_hub: whether the hub keywords apply.
        hub_kwargs: save_pretrained's other keywords.

    Raises:
        ValueError: an int8-quantized model.
        TypeError: an unknown keyword, or hub keywords without push_to_hub.
    """
    if any(getattr(module, "is_quantized", False) for module in model.modules()):
        raise ValueError(
            "save_pretrained: this model is int8-quantized, which bertlite does not save; save the float32 model "
            "and quantize at load (Embedder.from_pretrained(..., dtype='int8'))"
        )
    unknown = sorted(set(hub_kwargs) - set(PUSH_KWARGS))
    if unknown:
        raise TypeError(f"save_pretrained() got an unexpected keyword argument {unknown[0]!r}")
    if hub_kwargs and not push_to_hub:
        raise TypeError(f"save_pretrained(): {', '.join(sorted(hub_kwargs))} only apply with push_to_hub=True")


def _weight_files(
    state: dict[str, Tensor], safe_serialization: bool, max_bytes: int
) -> dict[str, bytes | dict[str, Tensor]]:
    """Lay the tensors out in weight files: one file, or numbered shards and their index.

    Args:
        state: the tensors to save (tensors_to_save).
        safe_serialization: safetensors names; False: pytorch_model*.bin names.
        max_bytes: the most bytes of one shard.

    Returns:
        File name -> the tensors it holds (or an index's bytes), in the order they go into place.
    """
    # Imported here, as in bertlite.hub: a load never needs it.
    from huggingface_hub import split_torch_state_dict_into_shards

    single, index_name, pattern = (
        (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, "model{suffix}.safetensors")
        if safe_serialization
        else (WEIGHTS_NAME, WEIGHTS_INDEX_NAME, "pytorch_model{suffix}.bin")
    )
    # The splitter transformers' save_pretrained uses, so the shards are the ones it writes. Every tensor
    # owns its storage now, so the storage size it measures is the tensor's and it groups no two keys.
    split = split_torch_state_dict_into_shards(state, filename_pattern=pattern, max_shard_size=max_bytes)
    files: dict[str, bytes | dict[str, Tensor]] = {}  # file name -> contents, in the order they go into place
    if not split.is_sharded:
        files[single] = state
    else:
        files.update({name: {key: state[key] for key in keys} for name, keys in split.filename_to_tensors.items()})
        index = {
            "metadata": {"total_parameters": sum(v.numel() for v in state.values()), **split.metadata},
            "weight_map": dict(sorted(split.tensor_to_filename.items())),
        }
        files[index_name] = _json_bytes(index)
    return files


def push_to_hub(
    model: BertPreTrainedModel,
    repo_id: str,
    *,
    safe_serialization: bool = True,
    max_shard_size: int | str = "50GB",
    token: str | bool | None = None,
    **hub_kwargs: Any,
) -> str:
    """Save the model into a temporary folder and upload it to the hub in one commit.

    Args:
        model: the model to upload.
        repo_id: the hub repo, created if needed.
        safe_serialization, max_shard_size: as in save_pretrained.
        token: the hub token; None: huggingface_hub's default (HF_TOKEN or the login).
        **hub_kwargs: commit_message, private, revision, create_pr (see push_folder).

    Returns:
        The commit's url.
    """
    unknown = sorted(set(hub_kwargs) - set(PUSH_KWARGS) | ({"repo_id"} & set(hub_kwargs)))
    if unknown:
        raise TypeError(f"push_to_hub() got an unexpected keyword argument {unknown[0]!r}")
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp, safe_serialization=safe_serialization, max_shard_size=max_shard_size)
        return push_folder(Path(tmp), default_repo_id=repo_id, token=token, **hub_kwargs)


STALE_HUB_WEIGHTS = (*WEIGHT_FILES, "model-*-of-*.safetensors", "pytorch_model-*-of-*.bin")
PUSH_KWARGS = ("repo_id", "commit_message", "private", "revision", "create_pr")


def push_folder(
    folder: Path,
    *,
    default_repo_id: str,
    repo_id: str | None = None,
    commit_message: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    token: str | bool | None = None,
) -> str:
    """Create the hub repo if needed and upload `folder` to it in one commit.

    Weight files of an earlier push (either format, any sharding) at the repo's top level are deleted
    in the same commit.

    Args:
        folder: the saved checkpoint.
        default_repo_id: the repo when repo_id is None.
        repo_id: the hub repo.
        commit_message: None: "Upload model with bertlite".
        private: a new repo's visibility; None: the hub's default.
        revision: the branch to commit to; None: the default branch.
        create_pr: open a pull request instead of committing to the branch.
        token: the hub token; None: huggingface_hub's default.

    Returns:
        The commit's url.
    """
    try:
        from huggingface_hub import HfApi
    except ImportError as e:  # a dependency of bertlite, but keep the hint for stripped-down installs
        raise ImportError("push_to_hub needs huggingface_hub: pip install huggingface_hub") from e
    api = HfApi(token=token)
    repo = api.create_repo(repo_id or default_repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo.repo_id,
        folder_path=folder,
        # Weights of an earlier push in the other format (or sharded differently) would be loaded instead of
        # these (safetensors wins over .bin): they go in the same commit. Only bertlite's names at the top, so
        # a sentence-transformers repo keeps e.g. 2_Dense/model.safetensors.
        delete_patterns=list(STALE_HUB_WEIGHTS),
        commit_message=commit_message or "Upload model with bertlite",
        revision=revision,
        create_pr=create_pr,
    )
    return commit.commit_url


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
    writers = {name: functools.partial(_write_one, name, contents) for name, contents in files.items()}
    temporary = write_temporaries(folder, writers)
    # Everything is written. Shards go into place first (new names hide nothing), then
    # stale weights go (an old model.safetensors would win over a new index), then the
    # index or the single file, then the config.
    shard_names = [name for name in files if SHARD_NAME.fullmatch(name)]
    for name in shard_names:
        os.replace(temporary.pop(name), folder / name)
    for old in folder.iterdir():
        stale = old.name in WEIGHT_FILES or SHARD_NAME.fullmatch(old.name)
        if stale and old.name not in files:
            old.unlink()
    for name, tmp in temporary.items():
        os.replace(tmp, folder / name)


def _write_one(name: str, contents: bytes | dict[str, Tensor], path: str) -> None:
    if isinstance(contents, bytes):
        Path(path).write_bytes(contents)
        return
    tensors = {key: value.to("cpu") for key, value in contents.items()}
    if name.endswith(".bin"):
        torch.save(tensors, path)  # tensors only: loads with torch.load(weights_only=True)
    else:
        save_file(tensors, path, metadata={"format": "pt"})  # transformers checks the format tag
