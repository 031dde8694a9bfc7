"""Read a BERT checkpoint (safetensors, sharded or not, or legacy .bin) into a model.

The model is built on the meta device and the checkpoint's tensors are assigned
in place, so weights are never randomly initialised only to be overwritten and
are held once in memory. Keys are checked strictly and reported by name.

This module is the load itself: from_pretrained's steps, the one place a load fails or warns, and the
assignment into the model. Its parts live beside it: remap.py (the weight map), files.py (finding and
reading weight files), safety.py (what is refused), plan.py (what goes where).
"""

from __future__ import annotations

import copy
import inspect
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# The `X as X` names are re-exported: they lived here before the package was split into its parts, and
# users, tests and bertlite.jobs.multi_vector (iter_tensors) import them from bertlite.checkpoint.load.
from bertlite.checkpoint.files import SAFE_WEIGHTS_INDEX_NAME as SAFE_WEIGHTS_INDEX_NAME
from bertlite.checkpoint.files import SAFE_WEIGHTS_NAME as SAFE_WEIGHTS_NAME
from bertlite.checkpoint.files import WEIGHTS_CANDIDATES as WEIGHTS_CANDIDATES
from bertlite.checkpoint.files import WEIGHTS_INDEX_NAME as WEIGHTS_INDEX_NAME
from bertlite.checkpoint.files import WEIGHTS_NAME as WEIGHTS_NAME
from bertlite.checkpoint.files import checkpoint_keys, iter_tensors, resolve_weight_files
from bertlite.checkpoint.plan import MAX_LISTED as MAX_LISTED
from bertlite.checkpoint.plan import LoadPlan, LoadReport, plan_load
from bertlite.checkpoint.remap import BASE_MODULES as BASE_MODULES
from bertlite.checkpoint.remap import HEAD_MODULES as HEAD_MODULES
from bertlite.checkpoint.remap import IGNORED_BUFFERS as IGNORED_BUFFERS
from bertlite.checkpoint.remap import UNSUPPORTED_TENSORS as UNSUPPORTED_TENSORS
from bertlite.checkpoint.remap import remap_key as remap_key
from bertlite.checkpoint.remap import remap_state_dict as remap_state_dict
from bertlite.checkpoint.remap import rename_legacy_key as rename_legacy_key
from bertlite.checkpoint.safety import MAX_PICKLE_BYTES as MAX_PICKLE_BYTES
from bertlite.checkpoint.safety import MAX_PICKLE_BYTES_PER_RECORD as MAX_PICKLE_BYTES_PER_RECORD
from bertlite.config import TELEMETRY_KWARGS, BertConfig, as_bert_config
from bertlite.errors import NONFINITE_HINT, STRICT_HINT, CheckpointError, ShapeMismatchError
from bertlite.hub import pop_hub_kwargs
from bertlite.utils.dtypes import parse_dtype
from bertlite.utils.warn import warn_user

M = TypeVar("M", bound=nn.Module)


# load_checkpoint takes three steps: plan_load (plan.py) works out what goes where without touching the
# model, _raise_or_warn is the one place a load fails or warns, assign_plan puts the tensors into the model.


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


# A layer's keys: encoder.layer.N. (DistilBERT's: transformer.layer.N.; ModernBERT's: layers.N.).
_LAYER_KEY = re.compile(r"(?:^|\.)(?:(?:encoder|transformer)\.layer|layers)\.(\d+)\.")


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
        keys = checkpoint_keys(path)
        if keys is None:
            return
        layers.update(int(m.group(1)) for m in map(_LAYER_KEY.search, keys) if m)
    if layers and len(layers) != config.num_hidden_layers:
        found = (
            f"layers {min(layers)} to {max(layers)}" if len(layers) == max(layers) + 1 else f"layers {sorted(layers)}"
        )
        field = getattr(type(config), "attribute_map", {}).get("num_hidden_layers", "num_hidden_layers")  # n_layers
        raise CheckpointError(
            f"cannot load {what}: config.json has {field}={config.num_hidden_layers}, but the checkpoint "
            f"({', '.join(p.name for p in files)}) holds {len(layers)} encoder layers ({found}); "
            "is config.json the config of these weights?"
        )


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
        **kwargs: the hub options of bertlite.hub.resolve_file (revision, cache_dir, token,
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
    hub_kwargs = _pop_loading_kwargs(kwargs)
    load_dtype = _load_dtype(dtype, torch_dtype)
    device = resolve_device(device, device_map)
    config, model_kwargs = _resolve_config(cls, name_or_path, config, kwargs, hub_kwargs)
    files = resolve_weight_files(name_or_path, **hub_kwargs)
    load_dtype = resolve_auto_dtype(config, files) if load_dtype == "auto" else load_dtype
    what = f"{cls.__name__} from {name_or_path}"
    if strict:
        check_layer_count(config, files, what)
    model = _build_model(cls, config, model_kwargs, attn_implementation)
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
    return (model, report.loading_info()) if output_loading_info else model


def _pop_loading_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the hub options out of from_pretrained's keywords, and drop those that change nothing here.

    Args:
        kwargs: from_pretrained's other keywords, changed in place: the config fields and constructor
            arguments are left.

    Returns:
        The hub options (bertlite.hub.pop_hub_kwargs).
    """
    hub_kwargs = pop_hub_kwargs(kwargs)
    for key in (*NO_OP_LOAD_KWARGS, *TELEMETRY_KWARGS):
        kwargs.pop(key, None)
    return hub_kwargs


def _build_model(cls: type[M], config: BertConfig, model_kwargs: dict[str, Any], attn_implementation: str | None) -> M:
    """Build `cls` on the meta device, without initialising weights that the load then assigns.

    Args:
        cls: the model class.
        config: its config.
        model_kwargs: the constructor's keywords.
        attn_implementation: from_pretrained's; None: the constructor's default (the config's).

    Returns:
        The model, its parameters on the meta device.
    """
    if attn_implementation is not None:
        model_kwargs["attn_implementation"] = attn_implementation
    with empty_init():
        return cls(config, **model_kwargs)


def _load_dtype(dtype: torch.dtype | str | None, torch_dtype: torch.dtype | str | None) -> torch.dtype | str | None:
    """The dtype to load in, from dtype= or its old name torch_dtype=.

    Args:
        dtype, torch_dtype: as from_pretrained takes them.

    Returns:
        parse_dtype's result: a torch.dtype, "auto", or None (float32).

    Raises:
        ValueError: both given, and they disagree.
    """
    if dtype is not None and torch_dtype is not None and dtype != torch_dtype:
        raise ValueError(f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree (torch_dtype is dtype's old name)")
    return parse_dtype(dtype if dtype is not None else torch_dtype)


def _resolve_config(
    cls: type,
    name_or_path: str | os.PathLike,
    config: Any,
    kwargs: dict[str, Any],
    hub_kwargs: dict[str, Any],
) -> tuple[BertConfig, dict[str, Any]]:
    """The config to build `cls` from, and the keywords left for its constructor.

    Args:
        cls: the model class.
        name_or_path: the checkpoint, whose config.json is read when `config` is None.
        config: from_pretrained's config= (a BertConfig, an object with to_dict(), a path, or None).
        kwargs: the keywords left once the hub and loading options are taken: config fields, then
            constructor arguments.
        hub_kwargs: the hub options, to find config.json.

    Returns:
        (the config, its name_or_path set to `name_or_path`; the constructor's keywords).

    Raises:
        TypeError: config fields given together with a config object, or a keyword the constructor does
            not take.
    """
    config_class = getattr(cls, "config_class", None) or BertConfig
    if config is not None and not isinstance(config, (BertConfig, str, os.PathLike)):
        config = as_bert_config(config, config_class)  # e.g. a transformers.BertConfig
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
        config, model_kwargs = config_class.from_pretrained(
            name_or_path if config is None else config, return_unused_kwargs=True, **hub_kwargs, **kwargs
        )
    _check_model_kwargs(cls, model_kwargs)
    config.name_or_path = name_or_path  # before the model is built, whose name_or_path it becomes
    return config, model_kwargs


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
