"""Read a BERT checkpoint (safetensors, sharded or not, or legacy .bin) into a model.

The model is built on the meta device and the checkpoint's tensors are assigned
in place, so weights are never randomly initialised only to be overwritten and
are held once in memory. Keys are checked strictly and reported by name.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import pickle
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from bertlite.checkpoint.hub import pop_hub_kwargs, resolve_file
from bertlite.config import TELEMETRY_KWARGS, BertConfig, as_bert_config
from bertlite.errors import (
    NONFINITE_HINT,
    STRICT_HINT,
    CheckpointError,
    NotCachedError,
    ShapeMismatchError,
    WeightsNotFoundError,
)
from bertlite.utils.dtypes import parse_dtype
from bertlite.utils.warn import warn_user

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_NAME = "pytorch_model.bin"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
# Preference order: safetensors never runs code, so it wins when both exist.
WEIGHTS_CANDIDATES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)

# Top-level modules of the base model, and the heads' modules around it.
BASE_MODULES = ("embeddings.", "encoder.", "pooler.")
HEAD_MODULES = ("cls.", "classifier.", "qa_outputs.")
# transformers' non-persistent buffers, saved by old versions: derived, never loaded.
IGNORED_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Tensors that would change the outputs but have no module in the model being
# loaded. Dropping them would give silently wrong numbers, so they fail even with
# strict=False. distance_embedding loads when the config asks for relative positions.
UNSUPPORTED_TENSORS = {
    "distance_embedding": "relative position embeddings, but config.json has no "
    "position_embedding_type relative_key or relative_key_query",
    "crossattention": "cross-attention layers (add_cross_attention=True)",
}

# Keys listed per kind in a load error; the full lists stay in LoadReport.
MAX_LISTED = 20


M = TypeVar("M", bound=nn.Module)
V = TypeVar("V")


def rename_legacy_key(key: str) -> str:
    """Rename a TF-era key: LayerNorm.gamma/beta -> weight/bias.

    Args:
        key: a checkpoint key.

    Returns:
        The key with a `.gamma` / `.beta` suffix renamed, any other key unchanged.
    """
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def remap_key(key: str, *, base_model_prefix: str = "bert", with_prefix: bool = False) -> str | None:
    """Map a checkpoint key to its canonical name for the target model.

    Unknown keys pass through so the strict check can report them.

    Args:
        key: a checkpoint key (legacy gamma/beta names are renamed).
        base_model_prefix: the base model's attribute in a head class (default "bert").
        with_prefix: False targets a BertModel: the `bert.` prefix is stripped and the heads' keys are
            dropped. True targets a head class, whose base model lives under `bert.`.

    Returns:
        The canonical key, or None to drop it.
    """
    prefix = base_model_prefix + "."
    key = rename_legacy_key(key)
    bare = key[len(prefix) :] if key.startswith(prefix) else key
    if bare in IGNORED_BUFFERS:
        return None
    if with_prefix:
        return prefix + bare if bare.startswith(BASE_MODULES) else key
    return None if key.startswith(HEAD_MODULES) else bare


def remap_state_dict(
    state_dict: Mapping[str, V], *, base_model_prefix: str = "bert", with_prefix: bool = False
) -> dict[str, V]:
    """Apply remap_key to a whole state_dict.

    Args:
        state_dict: checkpoint keys to values (tensors or anything else; values are not touched).
        base_model_prefix, with_prefix: as in remap_key.

    Returns:
        A new dict with the canonical keys, the dropped keys left out.
    """
    out: dict[str, V] = {}
    for key, value in state_dict.items():
        new_key = remap_key(key, base_model_prefix=base_model_prefix, with_prefix=with_prefix)
        if new_key is not None:
            out[new_key] = value
    return out


# --- finding and reading files ------------------------------------------------


def resolve_weight_files(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> list[Path]:
    """Find the weight files of a checkpoint, in the preferred format (WEIGHTS_CANDIDATES' order).

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.checkpoint.hub.resolve_file (revision, subfolder, ...).

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
        _check_shard_name(path, shard)
    return shards


def _check_shard_name(index: Path, shard: str) -> None:
    # Checked by name, not by resolving: a local folder may be a hub snapshot, whose files are
    # symlinks into the cache's blobs folder.
    posix = PurePosixPath(shard.replace("\\", "/"))  # either separator, as on Windows
    if posix.is_absolute() or PureWindowsPath(shard).drive or ".." in posix.parts:
        raise CheckpointError(
            f"{index}: refused shard {shard!r}: it is outside the checkpoint folder; "
            "a shard index may only name files in its own folder"
        )


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
    zipped = _check_bin_file(path)
    try:
        # Pre-zip (torch < 1.6) files cannot be memory-mapped.
        state_dict = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError as e:
        detail = _unpickler_detail(e)
        if "GLOBAL" not in detail.upper():
            raise CheckpointError(f"{path}: not a PyTorch checkpoint (unpickling failed: {detail})") from e
        raise CheckpointError(
            f"{path}: refused to load; it holds pickled objects other than tensors, which could run code "
            f"(bertlite reads .bin files only with torch.load(weights_only=True)): {detail.rstrip('.')}. "
            "Convert it to safetensors with a tool you trust, or use a checkpoint from a trusted source"
        ) from e
    except (RuntimeError, ValueError, OSError, EOFError, KeyError, IndexError, zipfile.BadZipFile) as e:
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint ({type(e).__name__}: {_without_unsafe_advice(e)})"
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
# the unpickler's work, and a zip entry may be compressed: a 1 MB file can hold a pickle of gigabytes.
MAX_PICKLE_BYTES = 1 << 20
MAX_PICKLE_BYTES_PER_RECORD = 1 << 10


def _check_bin_file(path: Path) -> bool:
    """Refuse, before torch.load reads it, a .bin that is no checkpoint or whose pickle is far larger than
    its tensors need; True for torch's zip format (which can be memory-mapped), False for a legacy pickle."""
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


def _without_unsafe_advice(error: Exception) -> str:
    """torch's message less its advice to retry with weights_only=False, which bertlite never gives."""
    text = str(error)
    unsafe = getattr(torch.serialization, "UNSAFE_MESSAGE", None)  # torch >= 2.6 words it so
    if unsafe:
        text = text.replace(unsafe, "")
    sentences = re.split(r"(?<=\.)\s+", text.strip())
    kept = [s for s in sentences if not re.search(r"weights_only\W*(=|set to)\W*False", s)]
    return " ".join(kept).strip() or type(error).__name__


def _unpickler_detail(error: Exception) -> str:
    """The one informative line of torch's long weights_only error (which also
    suggests weights_only=False, advice bertlite must not pass on)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines[1:] if not line.startswith(("Check the documentation", "Please file"))]
    return useful[-1] if useful else lines[0] if lines else type(error).__name__


# --- loading into a model -----------------------------------------------------
# Three steps: plan_load works out what goes where without touching the model, _raise_or_warn is the one
# place a load fails or warns, assign_plan puts the tensors into the model.


@dataclass
class LoadReport:
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)  # "key: checkpoint (a, b) in file, model (c, d)"
    unsupported: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # two checkpoint keys for one weight
    nonfinite: list[str] = field(default_factory=list)  # "key in file (n NaN)": an error unless allow_nonfinite
    # Not errors, only warned: a head class from a checkpoint without that head, as transformers allows, and
    # tied weights the checkpoint holds apart.
    initialized: list[str] = field(default_factory=list)  # head weights the checkpoint has none of: fresh init
    resized: list[str] = field(default_factory=list)  # wrong shape, fresh init (ignore_mismatched_sizes=True)
    ignored: list[str] = field(default_factory=list)  # another head's tensors (e.g. cls.* for a classifier)
    # A head's tensors a BertModel has no place for (cls.* of a pre-training checkpoint): only listed, in
    # loading_info, not warned, since every base model loaded from such a checkpoint has them.
    headless: list[str] = field(default_factory=list)
    untied: list[tuple[str, str]] = field(default_factory=list)  # (target, source) tied pairs loaded apart

    def message(self, what: str) -> str:
        """Describe why a strict load failed.

        Args:
            what: what was loaded, for the first line (e.g. "BertModel from path (files: ...)").

        Returns:
            "cannot load {what}:" and one line per kind of problem, sorted keys, at most MAX_LISTED each.
        """
        lines = [f"cannot load {what}:"]
        # A tensor of the wrong shape is not loaded, so it is missing too: listing it twice says nothing new.
        mismatched_keys = {_key_of(item) for item in self.mismatched}
        for title, items in (
            ("tensors bertlite does not implement", self.unsupported),
            ("conflicting keys", self.conflicts),
            ("shape or dtype mismatch", self.mismatched),
            ("missing keys", [key for key in self.missing if key not in mismatched_keys]),
            ("unexpected keys", self.unexpected),
        ):
            if items:
                # A checkpoint of another size mismatches every tensor: the first few tell the story.
                shown = sorted(items)[:MAX_LISTED]
                more = f", ... ({len(items) - len(shown)} more)" if len(items) > len(shown) else ""
                lines.append(f"  {title} ({len(items)}): " + ", ".join(shown) + more)
        if any("checkpoint dtype" not in item for item in self.mismatched):
            lines.append("  (the model's shapes come from config.json: is it the config of these weights?)")
        return "\n".join(lines)

    def loading_info(self) -> dict[str, list[str]]:
        """transformers' output_loading_info dict, of a load that succeeded.

        Returns:
            {"missing_keys": the model's keys the checkpoint did not fill, "unexpected_keys": the
            checkpoint's keys not used, "mismatched_keys": the weights newly initialised for their
            shape, "error_msgs": []}.
        """
        return {
            "missing_keys": self.missing + self.initialized,
            "unexpected_keys": [_key_of(item) for item in self.unexpected] + self.ignored + self.headless,
            "mismatched_keys": [_key_of(item) for item in self.resized],
            "error_msgs": [],
        }


def _key_of(item: str) -> str:
    """The key a report entry is about: "key (in file)", "key: checkpoint (2, 32), model (5, 32)"."""
    return item.split(" ", 1)[0].removesuffix(":")


@dataclass
class LoadPlan:
    """What loading a checkpoint into a model does, worked out without touching the model (plan_load)."""

    tensors: dict[str, Tensor]  # model key -> the checkpoint's tensor, converted to dtype on device
    tied: dict[str, str]  # target -> source: the pairs to tie once the tensors are assigned
    report: LoadReport
    device: torch.device
    dtype: torch.dtype


@dataclass
class _Target:
    """The model a plan is for: its keys and shapes, and how the checkpoint's keys map onto them."""

    expected: Mapping[str, tuple[int, ...]]
    base_model_prefix: str
    ignore_mismatched_sizes: bool
    with_prefix: bool = field(init=False)  # a head class, whose base model lives under `bert.`
    has_pooler: bool = field(init=False)

    def __post_init__(self) -> None:
        self.with_prefix = any(k.startswith(self.base_model_prefix + ".") for k in self.expected)
        self.has_pooler = any(k.startswith(("pooler.", self.base_model_prefix + ".pooler.")) for k in self.expected)


def load_checkpoint(
    model: nn.Module,
    files: list[Path],
    *,
    strict: bool = True,
    dtype: torch.dtype | None = None,
    device: torch.device | str | int | None = None,
    what: str = "checkpoint",
    ignore_mismatched_sizes: bool = False,
    allow_nonfinite: bool = False,
) -> LoadReport:
    """Assign the tensors of `files` to `model` (built on meta or not); check keys strictly.

    Nothing in the model changes unless the load succeeds.

    Args:
        model: the model to fill.
        files: its weight files (resolve_weight_files).
        strict: fail on missing, unexpected or mismatched keys (default True).
        dtype: the dtype to load in; None: float32.
        device: where to put the tensors; None: the CPU.
        what: what is loaded, for error messages.
        ignore_mismatched_sizes: newly initialise, with a warning, weights whose shape differs.
        allow_nonfinite: a tensor holding NaN or Inf (once in `dtype`) is an error unless True,
            which warns instead.

    Returns:
        The LoadReport of the load.

    Raises:
        CheckpointError: the checkpoint does not fit the model, or holds NaN or Inf.
    """
    plan = plan_load(
        files,
        expected_shapes(model),
        base_model_prefix=getattr(model, "base_model_prefix", "bert"),
        tied_pairs=_tied_pairs(model),
        dtype=dtype,
        device=device,
        ignore_mismatched_sizes=ignore_mismatched_sizes,
    )
    what = f"{what} (files: {', '.join(p.name for p in files)})"
    _raise_or_warn(plan.report, what, strict=strict, allow_nonfinite=allow_nonfinite)
    assign_plan(model, plan)
    return plan.report


def expected_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """List the keys and shapes a checkpoint for `model` must hold.

    Args:
        model: the model (on meta or not).

    Returns:
        Its state_dict's keys, each with its shape.
    """
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def _tied_pairs(model: nn.Module) -> dict[str, str]:
    tied_weights_keys = getattr(model, "tied_weights_keys", None)
    return tied_weights_keys() if tied_weights_keys is not None else {}


def plan_load(
    files: list[Path],
    expected: Mapping[str, tuple[int, ...]],
    *,
    base_model_prefix: str = "bert",
    tied_pairs: Mapping[str, str] | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | int | None = None,
    ignore_mismatched_sizes: bool = False,
) -> LoadPlan:
    """Work out which tensor of `files` goes to which key of a model, without touching the model.

    Pure: it reads the files, and touches no model and warns nothing; load_checkpoint decides what the
    report means.

    Args:
        files: the weight files.
        expected: the model's keys and shapes (expected_shapes).
        base_model_prefix: as in remap_key.
        tied_pairs: the model's tied weights (target -> source, its tied_weights_keys()); None: none.
        dtype: the dtype to convert to; None: float32.
        device: where to put the tensors; None: the CPU.
        ignore_mismatched_sizes: report a wrong shape as to be newly initialised, not as a mismatch.

    Returns:
        A LoadPlan: the tensors by model key, the pairs to tie, and a LoadReport of what does not fit.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    dtype = dtype or torch.float32
    target = _Target(expected, base_model_prefix, ignore_mismatched_sizes)
    report = LoadReport()
    tensors: dict[str, Tensor] = {}
    source: dict[str, str] = {}  # model key -> "raw key in file", to report collisions
    headers: dict[Path, dict[str, Any]] = {}
    for path, raw_key, key, tensor in _remapped_tensors(files, target, report):
        where = f"{raw_key!r} in {path.name}"
        if key in source:
            # e.g. both bert.x and x, or both gamma and weight: which one is right is unknowable.
            report.conflicts.append(f"{key}: given twice, as {source[key]} and as {where}")
            continue
        source[key] = where
        if _fits(report, target, key, tensor, path):
            tensors[key] = tensor.to(device=device, dtype=dtype)
            finite = None
            if tensors[key] is tensor and path.suffix == ".safetensors":
                finite = _all_finite_in_file(path, raw_key, headers)
            if not (_all_finite(tensors[key]) if finite is None else finite):
                report.nonfinite.append(_describe_nonfinite(key, path, tensor, tensors[key]))
    tied = _resolve_tied(tied_pairs or {}, tensors, report)
    _report_missing(report, target, set(expected) - set(tensors) - set(tied), present=source)
    return LoadPlan(tensors, tied, report, device, dtype)


def _remapped_tensors(
    files: list[Path], target: _Target, report: LoadReport
) -> Iterator[tuple[Path, str, str, Tensor]]:
    """(file, key in the file, model key, tensor) for each tensor remap_key keeps, one at a time: a dtype
    conversion never holds the checkpoint twice. A head's tensors dropped for a BertModel go to report.headless."""
    for path in files:
        for raw_key, tensor in iter_tensors(path):
            key = remap_key(raw_key, base_model_prefix=target.base_model_prefix, with_prefix=target.with_prefix)
            if key is not None:
                yield path, raw_key, key, tensor
            elif not target.with_prefix and (head_key := rename_legacy_key(raw_key)).startswith(HEAD_MODULES):
                report.headless.append(head_key)


def _fits(report: LoadReport, target: _Target, key: str, tensor: Tensor, path: Path) -> bool:
    """Whether a checkpoint tensor loads as the model's `key`; where not, `report` says why."""
    expected = target.expected.get(key)
    if expected is None:
        _report_unknown(report, target, key, path)
        return False
    shape = tuple(tensor.shape)
    if shape != expected and target.ignore_mismatched_sizes:
        # transformers' option for a new head on a fine-tuned checkpoint (num_labels=5 over 2 labels).
        report.resized.append(f"{key}: checkpoint {shape}, model {expected}")
    elif shape != expected:
        report.mismatched.append(f"{key}: checkpoint {shape} in {path.name}, model {expected}")
    elif not tensor.is_floating_point():
        report.mismatched.append(f"{key}: checkpoint dtype {tensor.dtype} in {path.name}, model expects floats")
    else:
        return True
    return False


def _report_unknown(report: LoadReport, target: _Target, key: str, path: Path) -> None:
    """File a checkpoint key the model has no weight for."""
    unsupported = [why for name, why in UNSUPPORTED_TENSORS.items() if name in key]
    if unsupported:
        report.unsupported.append(f"{key} in {path.name} ({unsupported[0]})")
    elif "pooler." in key and not target.has_pooler:
        return  # transformers also ignores a pooler the model was built without
    elif target.with_prefix and key.startswith(HEAD_MODULES):
        report.ignored.append(key)  # e.g. the pre-training heads, for a classifier
    else:
        report.unexpected.append(f"{key} (in {path.name})")


def _report_missing(report: LoadReport, target: _Target, missing: set[str], *, present: Iterable[str]) -> None:
    """File the model keys no tensor loads into: a head part the checkpoint has nothing of is initialised
    (initialized), a resized weight is reported as such already, the rest is missing."""
    initialized = _new_head_weights(missing, present=present, base_model_prefix=target.base_model_prefix)
    resized = {_key_of(item) for item in report.resized}
    report.initialized = sorted(initialized)
    report.missing = sorted(missing - initialized - resized)


def _raise_or_warn(report: LoadReport, what: str, *, strict: bool, allow_nonfinite: bool) -> None:
    """The one place a load fails (CheckpointError, with the report) or warns, before the model is touched."""
    for target, source in report.untied:
        warn_user(
            f"{target} and {source} should be tied (config.tie_word_embeddings) but the checkpoint holds "
            "different values for them, so they are loaded untied; set tie_word_embeddings=False to silence this"
        )
    if report.unsupported or report.conflicts or report.mismatched:
        error = ShapeMismatchError if report.mismatched else CheckpointError
        raise error(report.message(what), report)
    if report.nonfinite:
        message = _nonfinite_message(report.nonfinite, what)
        if not allow_nonfinite:
            raise CheckpointError(f"{message}; the checkpoint is corrupt or its training diverged ({NONFINITE_HINT})")
        warn_user(f"{message} (allow_nonfinite=True: loaded as they are)")
    if report.missing or report.unexpected:
        if strict:
            raise CheckpointError(report.message(what) + f"\n  {STRICT_HINT}", report)
        warn_user(report.message(what) + "\n  (strict=False: missing weights are freshly initialised)")
    for items, note in (
        (
            report.resized,
            "shapes differ from the checkpoint's (ignore_mismatched_sizes=True), so these are newly initialised "
            "(train the model before use)",
        ),
        (
            report.initialized,
            "the checkpoint has no weights for these, so they are newly initialised (train the model before use)",
        ),
        (sorted(report.ignored), "not used, the model has no such head"),
    ):
        if items:
            warn_user(f"{what}: {note}: {', '.join(items)}")


def _nonfinite_message(nonfinite: list[str], what: str) -> str:
    more = f", ... ({len(nonfinite) - 5} more)" if len(nonfinite) > 5 else ""
    return f"{what}: {len(nonfinite)} tensor(s) hold NaN or Inf: {', '.join(nonfinite[:5])}" + more


def assign_plan(model: nn.Module, plan: LoadPlan) -> None:
    """Put a plan's tensors into `model`.

    Also ties its tied weights, and gives the weights the checkpoint lacked real storage and
    transformers' initial values.

    Args:
        model: the model plan_load planned for (built on meta or not); changed in place.
        plan: plan_load's result.
    """
    model.load_state_dict(plan.tensors, strict=False, assign=True)
    # assign=True gives each module its own new Parameter, which unties; tying before
    # the init of missing weights spares the tied targets a useless init, tying after
    # covers a source that was itself missing (strict=False).
    if plan.tied:
        model.tie_weights(plan.tied)
    _materialize_missing(model, device=plan.device, dtype=plan.dtype)
    if plan.tied:
        model.tie_weights(plan.tied)


def _all_finite(tensor: Tensor) -> bool:
    # One reduction and no copy: a NaN or Inf anywhere makes the sum non-finite. A sum that overflows from
    # finite values is settled element by element; float16 sums in float32 (its own range ends at 65504).
    # sum(dtype=) only for float16: on other dtypes it takes a path several times slower than sum().
    total = tensor.sum(dtype=torch.float32) if tensor.dtype == torch.float16 else tensor.sum()
    return bool(torch.isfinite(total)) or bool(torch.isfinite(tensor).all())


_SAFETENSORS_FLOATS = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_CHECK_CHUNK = 8 << 20  # bytes read at a time


def _all_finite_in_file(path: Path, key: str, headers: dict[Path, dict[str, Any]]) -> bool | None:
    """_all_finite of a safetensors tensor loaded as it is (the model then holds the file's own mmapped
    pages), read from the file a chunk at a time instead of through that mapping: summing the tensor
    itself would fault every page in, and the embedding matrix, of which one sentence reads a few rows,
    would stay resident (measured: peak RSS 357 vs 313 MiB to a first vector, all-MiniLM-L6-v2).
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
            if not _all_finite(torch.frombuffer(memoryview(buffer)[:want], dtype=dtype)):
                return False
            left -= want
    return True


def _describe_nonfinite(key: str, path: Path, original: Tensor, converted: Tensor) -> str:
    nan, inf = int(converted.isnan().sum()), int(converted.isinf().sum())
    counts = ", ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "Inf")) if n)
    if converted.dtype != original.dtype and bool(torch.isfinite(original).all()):
        counts += f" once converted to {str(converted.dtype).removeprefix('torch.')}: values beyond its range"
    return f"{key} in {path.name} ({counts})"


def _resolve_tied(pairs: Mapping[str, str], loaded: dict[str, Tensor], report: LoadReport) -> dict[str, str]:
    """The tied pairs (target -> source) to tie after loading; `loaded` is left holding each one's tensor once,
    under the source's name.

    As in transformers, a checkpoint may hold the source (transformers' safetensors saves), the target, or both
    (old .bin saves); both with different values means it was trained untied, so they load apart (report.untied).
    """
    tied = {}
    for target, source in pairs.items():
        if target in loaded and source in loaded and not torch.equal(loaded[target], loaded[source]):
            report.untied.append((target, source))
            continue
        if target in loaded:
            loaded.setdefault(source, loaded.pop(target))
        tied[target] = source
    return tied


def _head_part(key: str, base_model_prefix: str) -> str | None:
    """The head part a model key belongs to (cls.predictions, cls.seq_relationship, classifier, qa_outputs, and
    the pooler of a head class), or None for the rest of the base model."""
    if key.startswith(base_model_prefix + ".pooler."):
        return base_model_prefix + ".pooler"  # masked-LM checkpoints have none, classifiers need one
    if not key.startswith(HEAD_MODULES):
        return None
    parts = key.split(".")
    return ".".join(parts[:2]) if parts[0] == "cls" else parts[0]


def _new_head_weights(missing: set[str], *, present: Iterable[str], base_model_prefix: str) -> set[str]:
    """Missing keys of head parts the checkpoint has no tensor of: a head class loaded from a base model's or
    another head's checkpoint, initialised as transformers does. A part with some tensors present but others
    missing is a broken checkpoint, and stays missing."""
    present_parts = {_head_part(key, base_model_prefix) for key in present}
    parts = {key: _head_part(key, base_model_prefix) for key in missing}
    return {key for key, part in parts.items() if part is not None and part not in present_parts}


def _materialize_missing(model: nn.Module, *, device: torch.device, dtype: torch.dtype) -> None:
    """Give weights the checkpoint lacked real storage and transformers' initial values."""
    init = getattr(model, "_init_weights", None)
    for module in model.modules():
        params = dict(module.named_parameters(recurse=False))
        if not any(p.is_meta for p in params.values()):
            continue
        # Init works on the whole module in place, so it gets fresh tensors for
        # every parameter; the loaded ones are put back afterwards, untouched.
        for name, p in params.items():
            setattr(module, name, nn.Parameter(torch.empty(p.shape, device=device, dtype=dtype)))
        if init is not None:
            init(module)
        for name, p in params.items():
            if not p.is_meta:
                setattr(module, name, p)


class _SkipInit(TorchFunctionMode):
    """Turns torch's in-place init calls into no-ops, for the current thread only."""

    _INIT_OPS = frozenset({"normal_", "uniform_", "zero_", "fill_", "kaiming_uniform_", "ones_", "zeros_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in self._INIT_OPS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


@contextmanager
def empty_init() -> Iterator[None]:
    """Build modules on the meta device without running their random init.

    Even on meta, torch's init functions pull in torch._dynamo (slow on first
    use), which would dominate a cold start; the values are overwritten anyway.
    Torch function modes are thread-local, so other threads building modules
    meanwhile are unaffected.
    """
    with _SkipInit(), torch.device("meta"):
        yield


def resolve_auto_dtype(config: BertConfig, files: list[Path]) -> torch.dtype:
    """Resolve transformers' dtype="auto".

    Args:
        config: the model's config (its `dtype` or `torch_dtype` field, if any).
        files: the weight files.

    Returns:
        The config's dtype, else the checkpoint's first float tensor's, else float32.
    """
    for key in ("dtype", "torch_dtype"):
        if isinstance(config.extra.get(key), str):
            return parse_dtype(config.extra[key])
    for _, tensor in iter_tensors(files[0]):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


_LAYER_KEY = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")


def check_layer_count(config: BertConfig, files: list[Path], what: str) -> None:
    """Refuse a config whose layer count differs from the checkpoint's before the model is built.

    Every layer costs time and memory even on the meta device, only for the strict key check to fail.
    The layers are read from key names: safetensors headers, a zip .bin's pickle (memory-mapped); a
    pre-zip .bin would be read whole, so it is left to the key check.

    Args:
        config: the config the model would be built from.
        files: the weight files.
        what: what is loaded, for the error message.

    Raises:
        CheckpointError: config.num_hidden_layers differs from the checkpoint's layer count.
    """
    layers: set[int] = set()
    for path in files:
        keys = _checkpoint_keys(path)
        if keys is None:
            return
        layers.update(int(m.group(1)) for m in map(_LAYER_KEY.search, keys) if m)
    if layers and len(layers) != config.num_hidden_layers:
        found = (
            f"layers {min(layers)} to {max(layers)}" if len(layers) == max(layers) + 1 else f"layers {sorted(layers)}"
        )
        raise CheckpointError(
            f"cannot load {what}: config.json has num_hidden_layers={config.num_hidden_layers}, but the checkpoint "
            f"({', '.join(p.name for p in files)}) holds {len(layers)} encoder layers ({found}); "
            "is config.json the config of these weights?"
        )


def _checkpoint_keys(path: Path) -> Iterable[str] | None:
    """A weight file's tensor names without reading its tensors; None where that is not cheap.

    For a zip .bin: the `encoder.layer.N.` prefixes in its pickle's bytes (of its keys, and of the module
    names torch saves with a state dict), found by a regex in about a millisecond; unpickling would cost
    as much as the load itself."""
    if path.suffix == ".safetensors":
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                return list(f.keys())
        except SafetensorError:
            return None  # iter_tensors reports the file as it reads it
    if not _check_bin_file(path):
        return None
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            return None  # torch.load reports it
        raw = archive.read(pickles[0])  # bounded by _check_bin_file
    return [name.decode() for name in re.findall(rb"encoder\.layer\.\d+\.", raw)]


def from_pretrained(
    cls: type[M],
    name_or_path: str | os.PathLike,
    *,
    config: BertConfig | str | os.PathLike | None = None,
    dtype: torch.dtype | str | None = None,
    torch_dtype: torch.dtype | str | None = None,
    device: torch.device | str | int | None = None,
    device_map: Any = None,
    strict: bool = True,
    attn_implementation: str | None = None,
    ignore_mismatched_sizes: bool = False,
    allow_nonfinite: bool = False,
    output_loading_info: bool = False,
    **kwargs: Any,
) -> M | tuple[M, dict[str, list[str]]]:
    """Load `cls` from a folder or a hub id, routing keywords as transformers' from_pretrained does.

    The model is built on the meta device and loaded in one pass, strictly.

    Args:
        cls: the model class (BertModel, a head class...).
        name_or_path: a local checkpoint folder or a hub id.
        config: a BertConfig (or an object with to_dict(), e.g. transformers' config), used as given, or
            a path to load one from; None: the checkpoint's config.json.
        dtype: torch.dtype or its name; None keeps float32; "auto" as in transformers (the config's
            dtype, else the checkpoint's).
        torch_dtype: dtype's old name; must agree with dtype when both are given.
        device: where to load the weights; None: the CPU.
        device_map: a single device, as device= ("auto": cuda if available, else cpu; {"": device}).
        strict: fail on missing, unexpected or mismatched keys (default True).
        attn_implementation: the attention to build the model with; None: the config's.
        ignore_mismatched_sizes: weights whose shape differs from the checkpoint's (a new num_labels) are
            newly initialised, with a warning, instead of failing the load.
        allow_nonfinite: a weight holding NaN or Inf is a CheckpointError naming it; True loads it with a
            warning (to inspect it).
        output_loading_info: also return transformers' loading-info dict.
        **kwargs: the hub options of bertlite.checkpoint.hub.resolve_file (revision, cache_dir, token,
            local_files_only, force_download, subfolder) find the files; config fields override the loaded
            config (num_labels=3, output_hidden_states=True, hidden_dropout_prob=0.0, ...; not allowed with a
            config object); the rest go to the constructor (add_pooling_layer=False).

    Returns:
        The model, in eval mode; with output_loading_info, (model, {"missing_keys", "unexpected_keys",
        "mismatched_keys", "error_msgs"}).

    Raises:
        CheckpointError: the checkpoint is missing, corrupt, does not fit the model, or holds NaN or Inf.
        TypeError: a keyword that is none of the above, naming it.
        ValueError: dtype and torch_dtype disagree, or device and device_map are both given.
    """
    hub_kwargs = pop_hub_kwargs(kwargs)
    for key in (*NO_OP_LOAD_KWARGS, *TELEMETRY_KWARGS):
        kwargs.pop(key, None)
    if dtype is not None and torch_dtype is not None and dtype != torch_dtype:
        raise ValueError(f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree (torch_dtype is dtype's old name)")
    load_dtype = parse_dtype(dtype if dtype is not None else torch_dtype)
    device = resolve_device(device, device_map)
    if config is not None and not isinstance(config, (BertConfig, str, os.PathLike)):
        config = as_bert_config(config)  # e.g. a transformers.BertConfig
    if isinstance(config, BertConfig):
        # transformers uses a given config as it is, and passes the keywords to the model's constructor.
        config = copy.deepcopy(config)
        fields = sorted(set(kwargs) & set(config.to_dict()) | ({"num_labels"} & set(kwargs)))
        if fields:
            raise TypeError(
                f"{cls.__name__}.from_pretrained() got config fields {', '.join(map(repr, fields))} together with "
                "config=; set them on the config instead"
            )
        model_kwargs = kwargs
    else:
        config, model_kwargs = BertConfig.from_pretrained(
            name_or_path if config is None else config, return_unused_kwargs=True, **hub_kwargs, **kwargs
        )
    _check_model_kwargs(cls, model_kwargs)
    config.name_or_path = name_or_path  # before the model is built, whose name_or_path it becomes
    files = resolve_weight_files(name_or_path, **hub_kwargs)
    if load_dtype == "auto":
        load_dtype = resolve_auto_dtype(config, files)
    if attn_implementation is not None:
        model_kwargs["attn_implementation"] = attn_implementation
    what = f"{cls.__name__} from {name_or_path}"
    if strict:
        check_layer_count(config, files, what)
    with empty_init():
        model = cls(config, **model_kwargs)
    report = load_checkpoint(
        model,
        files,
        strict=strict,
        dtype=load_dtype,
        device=device,
        what=what,
        ignore_mismatched_sizes=ignore_mismatched_sizes,
        allow_nonfinite=allow_nonfinite,
    )
    model.eval()
    if output_loading_info:
        return model, report.loading_info()
    return model


def _check_model_kwargs(cls: type, model_kwargs: dict[str, Any]) -> None:
    parameters = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(model_kwargs) - set(parameters) - {"self"})
    if unknown:
        raise TypeError(
            f"{cls.__name__}.from_pretrained() got an unexpected keyword argument {unknown[0]!r} "
            "(not a config field, a loading option or an argument of the model's constructor)"
        )


# from_pretrained keywords transformers accepts and that change nothing here: bertlite always builds on
# the meta device and loads in one pass.
NO_OP_LOAD_KWARGS = ("low_cpu_mem_usage", "_fast_init")


def resolve_device(device: torch.device | str | int | None, device_map: Any) -> torch.device | str | int | None:
    """Resolve the one device to load onto.

    Args:
        device: device= as given.
        device_map: transformers' device_map=: a device, "auto" (cuda if available, else cpu) or
            {"": device}; None: use `device`.

    Returns:
        The device (None: the default, the CPU).

    Raises:
        ValueError: both given, or a device_map that splits the model over devices.
    """
    if device_map is None:
        return device
    if device is not None:
        raise ValueError("pass device= or device_map=, not both")
    if isinstance(device_map, dict):
        if set(device_map) != {""}:
            raise ValueError(
                f"device_map={device_map!r} splits the model over devices, which bertlite does not do; "
                "pass one device (device_map='cuda:0', or {'': 'cuda:0'})"
            )
        device_map = device_map[""]
    if device_map == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device_map, str) and device_map in ("balanced", "balanced_low_0", "sequential"):
        raise ValueError(f"device_map={device_map!r} splits the model over devices; pass one device instead")
    return device_map
