"""A cross-encoder's activation on its logits: sentence-transformers' default for the label count, or the one
the folder names (built only from torch's classes, as sentence-transformers builds it without trust_remote_code).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from torch import nn

from bertlite.jobs.st.logs import logger


def default_activation(num_labels: int) -> nn.Module:
    """sentence-transformers' default: Sigmoid for one label (a relevance score), else Identity (logits)."""
    return nn.Sigmoid() if num_labels == 1 else nn.Identity()


def folder_activation(name: str | os.PathLike, st_path: str | None, config_extra: dict[str, Any]) -> nn.Module | None:
    """The activation a folder names, in sentence-transformers' order; None: the default.

    config_sentence_transformers.json's activation_fn first, then config.json's
    sentence_transformers.activation_fn, else its older sbert_ce_default_activation_function.
    """
    if st_path is not None and (found := resolve_activation(st_path, name)) is not None:
        return found
    st_section = config_extra.get("sentence_transformers")
    if isinstance(st_section, dict) and "activation_fn" in st_section:
        path = st_section["activation_fn"]
    else:
        path = config_extra.get("sbert_ce_default_activation_function")
    return resolve_activation(path, name) if isinstance(path, str) else None


def untrusted_activation(st_path: str | None, config_extra: dict[str, Any]) -> str | None:
    """The activation path a folder names that bertlite does not build (not torch's), in folder_activation's order.

    Args:
        st_path: config_sentence_transformers.json's activation_fn, if any.
        config_extra: config.json's fields beyond the model's.

    Returns:
        The first such path, or None.
    """
    st_section = config_extra.get("sentence_transformers")
    section_path = st_section.get("activation_fn") if isinstance(st_section, dict) else None
    paths = (st_path, section_path, config_extra.get("sbert_ce_default_activation_function"))
    return next((p for p in paths if isinstance(p, str) and not p.startswith("torch.")), None)


def resolve_activation(path: str, name: str | os.PathLike = "the checkpoint") -> nn.Module | None:
    """An activation module from its dotted path (e.g. "torch.nn.modules.activation.Sigmoid"), built without
    arguments.

    Only torch's are built, as sentence-transformers does without trust_remote_code; another path warns
    and gives None (the default activation).

    Raises:
        ValueError: a torch path that names no class.
    """
    if not path.startswith("torch."):
        # bertlite imports no code a checkpoint names, trust_remote_code or not; sentence-transformers' wording.
        logger.warning(
            f"Activation function path '{path}' is not trusted, using default activation function instead. "
            f"({name}: bertlite builds torch's activations only.)"
        )
        return None
    module_path, _, attr = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_path), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{name}: activation_fn {path!r} names no torch class") from e
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise ValueError(f"{name}: activation_fn {path!r} is not a torch.nn.Module class")
    return found()
