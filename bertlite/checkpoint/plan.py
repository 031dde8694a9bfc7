"""The plan of a load: which tensor of a checkpoint goes to which key of a model, and what does not fit.

plan_load reads the files (files.py), maps each key (remap.py), keeps the tensors of the right shape
converted to the model's dtype and checked finite (safety.py), and files every other key in a LoadReport.
It touches no model and warns nothing: load.py decides what the report means and assigns the tensors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bertlite.checkpoint.files import iter_tensors
from bertlite.checkpoint.remap import (
    HEAD_MODULES,
    IGNORED_UNEXPECTED,
    UNSUPPORTED_TENSORS,
    remap_key,
    rename_legacy_key,
    split_key,
)
from bertlite.checkpoint.safety import nonfinite_entry

# Keys listed per kind in a load error; the full lists stay in LoadReport.
MAX_LISTED = 20


@dataclass
class LoadReport:
    """What a load found, key by key: the errors (missing to nonfinite), then what is only warned or listed."""

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
    for path, raw_key, key, tensor, part in _remapped_tensors(files, target, report):
        where = f"{raw_key!r} in {path.name}"
        if key in source:
            # e.g. both bert.x and x, or both gamma and weight: which one is right is unknowable.
            report.conflicts.append(f"{key}: given twice, as {source[key]} and as {where}")
            continue
        source[key] = where
        if _fits(report, target, key, tensor, path):
            tensors[key] = tensor.to(device=device, dtype=dtype)
            problem = nonfinite_entry(key, raw_key, path, tensor, tensors[key], headers, whole=not part)
            if problem is not None:
                report.nonfinite.append(problem)
    tied = _resolve_tied(tied_pairs or {}, tensors, report)
    _report_missing(report, target, set(expected) - set(tensors) - set(tied), present=source)
    return LoadPlan(tensors, tied, report, device, dtype)


def split_fused(key: str, tensor: Tensor, base_model_prefix: str) -> list[tuple[str, Tensor]]:
    """A fused Linear's tensor (remap.FUSED_LINEARS) as its parts' keys and row blocks; any other as it is.

    Args:
        key: a model key.
        tensor: its tensor.
        base_model_prefix: the family's.

    Returns:
        [(part key, its rows)] in row order, or [(key, tensor)]. The rows are views of `tensor`, as transformers'
        split gives them: a GEMM's kernel for a few rows may follow its weight's alignment.
    """
    parts = split_key(key, base_model_prefix)
    if parts is None:
        return [(key, tensor)]
    return list(zip(parts, tensor.tensor_split(len(parts)), strict=True))


def _remapped_tensors(
    files: list[Path], target: _Target, report: LoadReport
) -> Iterator[tuple[Path, str, str, Tensor, bool]]:
    """(file, key in the file, model key, tensor, whether it is a fused tensor's part) for each tensor remap_key
    keeps, one at a time: a dtype conversion never holds the checkpoint twice. A fused Linear's tensor the model
    holds apart comes as its parts (split_fused). A head's tensors dropped for a BertModel go to report.headless."""
    for path in files:
        for raw_key, tensor in iter_tensors(path):
            key = remap_key(raw_key, base_model_prefix=target.base_model_prefix, with_prefix=target.with_prefix)
            if key is not None and key not in target.expected:
                parts = split_fused(key, tensor, target.base_model_prefix)
                yield from ((path, raw_key, name, rows, len(parts) > 1) for name, rows in parts)
            elif key is not None:
                yield path, raw_key, key, tensor, False
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
    elif any(name in key for name in IGNORED_UNEXPECTED.get(target.base_model_prefix, ())):
        return
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
