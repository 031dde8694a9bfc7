"""The models parity compares: bertlite's, transformers' eager fp32 reference, and transformers in the low
dtype whose own error sets the bar; with the task head config.json names, when bertlite has it.

transformers is imported here, lazily: it is the reference, not a dependency of the model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertlite.config import CONFIG_CLASSES, SIZE_FIELDS, BertConfig
from bertlite.errors import CheckpointError, ParityLoadError, one_line
from bertlite.models.auto import ARCHITECTURES, AutoModel, read_model_type
from bertlite.models.bert import BertModel
from bertlite.models.heads import MODEL_CLASSES
from bertlite.parity.compare import FAMILY_HEADS, HEAD_LOGITS


def head_architecture(name_or_path: str, head: str, hub_kwargs: dict[str, Any], notes: list[str]) -> str | None:
    """Pick the task head to compare.

    Args:
        name_or_path: the checkpoint.
        head: "auto": the first of config.json's architectures that bertlite implements (HEAD_LOGITS);
            "none": the base model only.
        hub_kwargs: hub options for config.json.
        notes: the report's notes, appended to.

    Returns:
        The head's architecture name; None compares the base model only.

    Raises:
        ParityLoadError: the config cannot be loaded.
    """
    try:
        config = _config_class(name_or_path, hub_kwargs).from_pretrained(name_or_path, **hub_kwargs)
    except (OSError, ValueError) as e:
        raise ParityLoadError(f"cannot load {name_or_path} with bertlite: {e}") from e
    architectures = config.extra.get("architectures") or []
    found = next((a for a in architectures if a in HEAD_LOGITS), None)
    if head == "none":
        if found:
            notes.append(f"--head none: the {found} head is not compared, only the base model under it")
        return None
    if found is None:
        notes.append(
            f"no task head bertlite implements in config.json's architectures {architectures}: base model only"
        )
    return found


def _config_class(name_or_path: str, hub_kwargs: dict[str, Any]) -> type[BertConfig]:
    """The config class of the checkpoint's family (BertConfig, RobertaConfig, ...), by config.json's model_type."""
    from bertlite.jobs.prepare import read_model_type

    return CONFIG_CLASSES.get(
        read_model_type(name_or_path, {k: v for k, v in hub_kwargs.items() if v is not None}), BertConfig
    )


def _check_reference_version(config: BertConfig, name_or_path: str, version: str) -> None:
    position_type = config.position_embedding_type
    if position_type == "alibi":
        # JinaBERT-v2: transformers has no module for it, only the checkpoint's own code.
        raise ParityLoadError(
            f"{name_or_path} is a JinaBERT-v2 model, which transformers has no module for (its checkpoints run "
            "their own code), so there is no reference to compare with (bertlite's tests compare it with the "
            "original's equations)"
        )
    if position_type != "absolute" and int(version.split(".")[0]) >= 5:
        # v5 would load the checkpoint and run it without its distance embeddings: a wrong reference.
        raise ParityLoadError(
            f"{name_or_path} uses position_embedding_type={position_type!r}, which transformers "
            f"{version} no longer implements (it drops distance_embedding); compare with "
            "transformers 4.x installed, e.g. in the .venv-legacy that `make test-legacy` builds"
        )


def load_models(
    name_or_path: str,
    reference: str,
    dtype: torch.dtype,
    attn: str,
    hub_kwargs: dict[str, Any],
    notes: list[str],
    architecture: str | None = None,
) -> tuple[nn.Module, nn.Module, nn.Module | None]:
    """Load the three models parity compares.

    Args:
        name_or_path: bertlite's checkpoint.
        reference: transformers' checkpoint.
        dtype: the dtype bertlite (and the low-precision reference) runs in.
        attn: bertlite's attn_implementation.
        hub_kwargs: hub options for both.
        notes: the report's notes, appended to (e.g. no pooler weights: both built without one).
        architecture: a head class name: all three are that head; None: BertModel.

    Returns:
        (bertlite on name_or_path in (dtype, attn); transformers eager fp32 on reference; transformers
        eager in dtype, whose own error sets the bar for low precision, or None for float32).

    Raises:
        ParityLoadError: transformers is missing, either side cannot load, or the two differ in shape.
    """
    try:
        import transformers
    except ImportError as e:
        raise ParityLoadError(
            "transformers is not installed; it is the reference: pip install transformers (or 'bertlite[test]')"
        ) from e
    transformers.utils.logging.disable_progress_bar()  # keep the report the only thing on the terminal
    if architecture is not None:
        return _load_heads(name_or_path, reference, dtype, attn, hub_kwargs, architecture)
    ours, pooler = _load_base(name_or_path, dtype, attn, hub_kwargs, notes)
    _check_reference_version(ours.config, name_or_path, transformers.__version__)
    kwargs = {k: v for k, v in hub_kwargs.items() if v is not None}
    if not pooler:
        kwargs["add_pooling_layer"] = False
    ref, theirs = _load_reference(transformers.AutoModel, "transformers", reference, dtype, kwargs)
    _check_same_shape(ours.config, ref.config, name_or_path, reference)
    return ours, ref, theirs


def _load_base(
    name_or_path: str, dtype: torch.dtype, attn: str, hub_kwargs: dict[str, Any], notes: list[str]
) -> tuple[BertModel, bool]:
    """Load bertlite's base model of the checkpoint's family (BertModel, XLMRobertaModel, ...); without a pooler
    when the checkpoint has no pooler weights (noted).

    Args:
        name_or_path, dtype, attn, hub_kwargs, notes: as in load_models.

    Returns:
        (the model, whether it has a pooler).

    Raises:
        ParityLoadError: bertlite cannot load the checkpoint.
    """
    pooler = True
    model_class = AutoModel.model_class(read_model_type(name_or_path, hub_kwargs))  # the family's base model
    try:
        try:
            ours = model_class.from_pretrained(name_or_path, dtype=dtype, attn_implementation=attn, **hub_kwargs)
        except CheckpointError as e:
            # Sentence-embedding checkpoints often ship without a pooler: compare
            # both sides without one rather than fail on two missing keys.
            if e.report is None or not e.report.missing or any(not k.startswith("pooler.") for k in e.report.missing):
                raise
            pooler = False
            notes.append("the checkpoint has no pooler weights: both models are built without a pooler")
            ours = model_class.from_pretrained(
                name_or_path, dtype=dtype, attn_implementation=attn, add_pooling_layer=False, **hub_kwargs
            )
    except (OSError, ValueError) as e:
        raise ParityLoadError(f"cannot load {name_or_path} with bertlite: {_for_parity(e)}") from e
    return ours, pooler


def _load_reference(
    auto: Any, label: str, reference: str, dtype: torch.dtype, kwargs: dict[str, Any]
) -> tuple[nn.Module, nn.Module | None]:
    """Load transformers' eager models of `reference`: in float32, and in `dtype` when that is lower.

    Args:
        auto: the transformers class to load with (AutoModel, or a head's Auto class).
        label: its name in an error ("transformers", "transformers.AutoModelForMaskedLM").
        reference: transformers' checkpoint.
        dtype: the dtype bertlite runs in.
        kwargs: hub options and constructor arguments.

    Returns:
        (the fp32 model, the model in dtype or None for float32), in eval mode.

    Raises:
        ParityLoadError: transformers refuses the checkpoint, with its own message.
    """
    try:
        ref = auto.from_pretrained(reference, attn_implementation="eager", dtype=torch.float32, **kwargs).eval()
        theirs = None
        if dtype != torch.float32:
            theirs = auto.from_pretrained(reference, attn_implementation="eager", dtype=dtype, **kwargs).eval()
    except Exception as e:  # the reference refusing the checkpoint, in whatever type: StrictDataclassError, ...
        raise ParityLoadError(f"cannot load {reference} with {label}: {type(e).__name__}: {one_line(e)}") from e
    return ref, theirs


def _load_heads(
    name_or_path: str, reference: str, dtype: torch.dtype, attn: str, hub_kwargs: dict[str, Any], architecture: str
) -> tuple[nn.Module, nn.Module, nn.Module | None]:
    """load_models for a task head: all three models are `architecture`.

    Args:
        name_or_path, reference, dtype, attn, hub_kwargs: as in load_models.
        architecture: the head's class name, a key of HEAD_LOGITS.

    Returns:
        As load_models.

    Raises:
        ParityLoadError: either side cannot load, or the two differ in shape.
    """
    import transformers

    model_class, auto_name = head_classes(architecture)
    try:
        ours = model_class.from_pretrained(name_or_path, dtype=dtype, attn_implementation=attn, **hub_kwargs)
    except (OSError, ValueError) as e:
        raise ParityLoadError(f"cannot load {name_or_path} as {architecture} with bertlite: {_for_parity(e)}") from e
    _check_reference_version(ours.config, name_or_path, transformers.__version__)
    auto = getattr(transformers, auto_name)
    kwargs = {k: v for k, v in hub_kwargs.items() if v is not None}
    ref, theirs = _load_reference(auto, f"transformers.{auto.__name__}", reference, dtype, kwargs)
    _check_same_shape(ours.config, ref.config, name_or_path, reference)
    return ours, ref, theirs


def head_classes(architecture: str) -> tuple[type[nn.Module], str]:
    """bertlite's class of a head, and the name of transformers' Auto class that loads it.

    Args:
        architecture: a key of HEAD_LOGITS (BertForMaskedLM, XLMRobertaForMaskedLM, ElectraForPreTraining, ...).

    Returns:
        (the bertlite class, e.g. "AutoModelForMaskedLM").
    """
    import bertlite

    auto = ARCHITECTURES[FAMILY_HEADS.get(architecture, architecture)]
    return MODEL_CLASSES.get(architecture) or getattr(bertlite, architecture), auto


def _check_same_shape(ours: BertConfig, theirs: Any, name: str, reference: str) -> None:
    # A family's names for BERT's sizes (DistilBERT's dim, hidden_dim, ...: its config's attribute_map).
    names = {k: getattr(type(ours), "attribute_map", {}).get(k, k) for k in SIZE_FIELDS}
    differ = [
        f"{names[k]} {getattr(theirs, names[k], None)} vs {getattr(ours, k)}"
        for k in SIZE_FIELDS  # a reference that differs in one cannot be compared
        # A size the reference's family has no field for (MPNet's type_vocab_size) shapes no tensor there.
        if hasattr(theirs, names[k]) and getattr(ours, k) != getattr(theirs, names[k])
    ]
    if differ:
        raise ParityLoadError(
            f"--reference {reference} has another shape than {name} ({', '.join(differ)}): parity compares one "
            "checkpoint in two implementations; give a reference of the same architecture"
        )


def _for_parity(error: BaseException) -> str:
    """A load error in one line, with what to do in parity instead of Python-only options (strict=, ...)."""
    return one_line(
        error,
        strict="(parity compares complete checkpoints: missing weights would be random and prove nothing)",
        nonfinite="NaN and Inf weights cannot be compared; use a checkpoint with finite weights",
    )
