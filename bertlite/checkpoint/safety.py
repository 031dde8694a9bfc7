"""The checks that stand between a checkpoint file and the model: what bertlite refuses, and why.

A shard index may only name files of its own folder; a .bin must be a state dict of tensors whose pickle
is no larger than its tensors need (checked before torch.load reads it, which then runs with
weights_only=True); torch's errors are passed on without its advice to unpickle unsafely; a weight
holding NaN or Inf is found, cheaply, as it loads. The readers (files.py) and the plan (plan.py) call
these; nothing here touches a model.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import torch
from torch import Tensor

from bertlite.errors import CheckpointError

# The pickle of a state dict takes ~200 bytes per tensor (its name and how to rebuild it). Its size bounds
# the unpickler's work, and a zip entry may be compressed: a 1 MB file can hold a pickle of gigabytes.
MAX_PICKLE_BYTES = 1 << 20
MAX_PICKLE_BYTES_PER_RECORD = 1 << 10


def check_shard_name(index: Path, shard: str) -> None:
    """Refuse a shard a shard index names outside its own folder (an absolute path, a drive, `..`).

    Args:
        index: the shard index, for the message.
        shard: a file name from its weight_map.

    Raises:
        CheckpointError: the shard is outside the checkpoint folder.
    """
    # Checked by name, not by resolving: a local folder may be a hub snapshot, whose files are
    # symlinks into the cache's blobs folder.
    posix = PurePosixPath(shard.replace("\\", "/"))  # either separator, as on Windows
    if posix.is_absolute() or PureWindowsPath(shard).drive or ".." in posix.parts:
        raise CheckpointError(
            f"{index}: refused shard {shard!r}: it is outside the checkpoint folder; "
            "a shard index may only name files in its own folder"
        )


def check_bin_file(path: Path) -> bool:
    """Refuse, before torch.load reads it, a .bin that is no checkpoint or whose pickle is far larger than
    its tensors need.

    Args:
        path: the .bin file.

    Returns:
        True for torch's zip format (which can be memory-mapped), False for a legacy (pre-zip) pickle.

    Raises:
        CheckpointError: neither format, a damaged zip, a TorchScript archive, or an oversized pickle.
    """
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:1] == b"\x80":  # PROTO: a pre-zip (torch < 1.6) file, read as written, never expanded
        return False
    if head[:4] != b"PK\x03\x04":
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint: neither a zip archive (torch.save) nor a pickle; "
            f"it starts with {head!r}"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (a damaged zip archive: {e})") from e
    names = [entry.filename for entry in entries]
    if any(name.endswith("/constants.pkl") for name in names):
        raise CheckpointError(
            f"{path}: a TorchScript archive (torch.jit.save), not a state dict of tensors; bertlite reads "
            "weights only: save model.state_dict() of the original model, as safetensors"
        )
    pickled = sum(entry.file_size for entry in entries if entry.filename.endswith("/data.pkl"))
    records = sum("/data/" in name for name in names)
    limit = MAX_PICKLE_BYTES + MAX_PICKLE_BYTES_PER_RECORD * records
    if pickled > limit:
        raise CheckpointError(
            f"{path}: refused to load: its data.pkl is {pickled} bytes for {records} tensor records "
            f"(a state dict needs at most {limit}); unpickling it would take minutes and gigabytes: "
            "the file is corrupt or built to exhaust memory"
        )
    return True


def without_unsafe_advice(error: Exception) -> str:
    """torch's message less its advice to retry with weights_only=False, which bertlite never gives.

    Args:
        error: what torch.load raised.

    Returns:
        Its message without the sentences that suggest weights_only=False (the error's type name if nothing
        is left).
    """
    text = str(error)
    unsafe = getattr(torch.serialization, "UNSAFE_MESSAGE", None)  # torch >= 2.6 words it so
    if unsafe:
        text = text.replace(unsafe, "")
    sentences = re.split(r"(?<=\.)\s+", text.strip())
    kept = [s for s in sentences if not re.search(r"weights_only\W*(=|set to)\W*False", s)]
    return " ".join(kept).strip() or type(error).__name__


def unpickler_detail(error: Exception) -> str:
    """The one informative line of torch's long weights_only error (which also
    suggests weights_only=False, advice bertlite must not pass on).

    Args:
        error: the pickle.UnpicklingError torch.load(weights_only=True) raised.

    Returns:
        Its last informative line.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines[1:] if not line.startswith(("Check the documentation", "Please file"))]
    return useful[-1] if useful else lines[0] if lines else type(error).__name__


def all_finite(tensor: Tensor) -> bool:
    """Whether a tensor holds no NaN and no Inf.

    Args:
        tensor: a floating point tensor.

    Returns:
        True when every element is finite.
    """
    # One reduction and no copy: a NaN or Inf anywhere makes the sum non-finite. A sum that overflows from
    # finite values is settled element by element; float16 sums in float32 (its own range ends at 65504).
    # sum(dtype=) only for float16: on other dtypes it takes a path several times slower than sum().
    total = tensor.sum(dtype=torch.float32) if tensor.dtype == torch.float16 else tensor.sum()
    return bool(torch.isfinite(total)) or bool(torch.isfinite(tensor).all())


_SAFETENSORS_FLOATS = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_CHECK_CHUNK = 8 << 20  # bytes read at a time


def _all_finite_in_file(path: Path, key: str, headers: dict[Path, dict[str, Any]]) -> bool | None:
    """all_finite of a safetensors tensor loaded as it is (the model then holds the file's own mmapped
    pages), read from the file a chunk at a time instead of through that mapping: summing the tensor
    itself would fault every page in, and the embedding matrix, of which one sentence reads a few rows,
    would stay resident.
    None where the file does not read back as its header says: the caller checks the tensor instead."""
    try:
        if path not in headers:
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                headers[path] = {"start": 8 + size, "entries": json.loads(f.read(size))}
        entry, start = headers[path]["entries"][key], headers[path]["start"]
        begin, end = entry["data_offsets"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    dtype = _SAFETENSORS_FLOATS.get(entry["dtype"])
    if dtype is None:  # integers and bools are finite
        return True
    element = torch.empty(0, dtype=dtype).element_size()
    buffer = bytearray(min(_CHECK_CHUNK, end - begin))
    with open(path, "rb") as f:
        f.seek(start + begin)
        left = end - begin
        while left > 0:
            want = min(len(buffer), left)
            if f.readinto(memoryview(buffer)[:want]) != want or want % element:
                return None
            if not all_finite(torch.frombuffer(memoryview(buffer)[:want], dtype=dtype)):
                return False
            left -= want
    return True


def _describe_nonfinite(key: str, path: Path, original: Tensor, converted: Tensor) -> str:
    nan, inf = int(converted.isnan().sum()), int(converted.isinf().sum())
    counts = ", ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "Inf")) if n)
    if converted.dtype != original.dtype and bool(torch.isfinite(original).all()):
        counts += f" once converted to {str(converted.dtype).removeprefix('torch.')}: values beyond its range"
    return f"{key} in {path.name} ({counts})"


def nonfinite_entry(
    key: str,
    raw_key: str,
    path: Path,
    original: Tensor,
    converted: Tensor,
    headers: dict[Path, dict[str, Any]],
    *,
    whole: bool = True,
) -> str | None:
    """Check a tensor as it loads for NaN and Inf, in the dtype the model gets it in.

    Args:
        key: the model key it loads as.
        raw_key: its key in the file.
        path: the file.
        original: the tensor as read from the file.
        converted: the tensor in the model's dtype and device (`original` itself when neither changed).
        headers: safetensors headers already read, by file; filled as files are read.
        whole: `original` is the file's whole tensor raw_key; False: a part of it (a fused Linear's), checked by
            its own values.

    Returns:
        None for a finite tensor, else "key in file (n NaN, m Inf)" for the load report.
    """
    finite = None
    if whole and converted is original and path.suffix == ".safetensors":
        finite = _all_finite_in_file(path, raw_key, headers)
    if all_finite(converted) if finite is None else finite:
        return None
    return _describe_nonfinite(key, path, original, converted)
