"""trust_remote_code=True as bertlite takes it: accepted for a checkpoint whose family bertlite implements itself, and
bertlite's own code runs; no code from a checkpoint ever runs.

A checkpoint asks for its own code through config.json's auto_map. Its model_type says whether bertlite can stand
in for that code: GTE's original layout ("new"), JinaBERT-v2's ("bert" with ALiBi and Jina's auto_map),
jina-embeddings-v3's (an "xlm-roberta" naming Jina's flash implementation), NomicBERT and EuroBERT are written only
as remote code, and bertlite implements them; any other auto_map under a type transformers implements would run
different code there than the plain architecture bertlite has, so it is refused, as is any type bertlite lacks.
"""

from __future__ import annotations

import os
from typing import Any

from bertlite.config import FAMILIES
from bertlite.config.checks import read_json_object
from bertlite.config.families import family_model_type
from bertlite.hub import resolve_file

__all__ = ["REMOTE_CODE_FAMILIES", "check_remote_code"]

# The families whose auto_map code bertlite implements natively (config.families.family_model_type).
REMOTE_CODE_FAMILIES = ("gte", "jina_bert", "jina_embeddings_v3", "nomic_bert", "eurobert")


def check_remote_code(name_or_path: str | os.PathLike, hub_kwargs: dict[str, Any]) -> None:
    """Accept trust_remote_code=True for this checkpoint, or refuse it by name.

    Args:
        name_or_path: the resolved folder or hub id.
        hub_kwargs: hub options of bertlite.hub.resolve_file (revision, cache_dir, token, local_files_only).

    Raises:
        ValueError: a model_type bertlite does not implement, or an auto_map naming code for a model type
            whose plain architecture bertlite would run instead.
    """
    given = {key: value for key, value in hub_kwargs.items() if value is not None}
    path = resolve_file(name_or_path, "config.json", **given)
    config = read_json_object(path) if path is not None else {}
    raw_type = config.get("model_type", "bert")
    model_type = family_model_type(config) or raw_type
    if model_type not in FAMILIES:
        raise ValueError(
            f"trust_remote_code=True: {name_or_path}'s model_type {raw_type!r} is not a family bertlite implements "
            f"({', '.join(FAMILIES)}), and bertlite runs no code from a checkpoint; use sentence-transformers for it"
        )
    if config.get("auto_map") and model_type not in REMOTE_CODE_FAMILIES:
        raise ValueError(
            f"trust_remote_code=True: {name_or_path}'s config.json names its own code (auto_map) for model_type "
            f"{raw_type!r}, which bertlite would run as the plain architecture; bertlite runs no code from a "
            "checkpoint: use sentence-transformers for it"
        )
