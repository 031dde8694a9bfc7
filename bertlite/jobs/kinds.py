"""Which job a checkpoint folder is for (embedding, cross-encoder, SPLADE, multi-vector, BGE-M3), and loading it.

`bertlite serve` serves one model per server and picks its routes by kind, as TEI does; the folder's
sentence-transformers files say the kind the way sentence-transformers 6 reads them.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from bertlite.jobs.st.folders import has_m3_heads, read_model_json

# kind -> (module, class) of the job class that runs it; imported on use (each pulls in its own head).
KINDS = {
    "embedding": ("bertlite.jobs.embedder", "Embedder"),
    "cross-encoder": ("bertlite.jobs.cross_encoder", "CrossEncoder"),
    "sparse": ("bertlite.jobs.sparse_encoder", "SparseEncoder"),
    "multi-vector": ("bertlite.jobs.multi_vector", "MultiVectorEncoder"),
    "m3": ("bertlite.jobs.m3", "M3Encoder"),
}
# sentence-transformers 6's config_sentence_transformers.json "model_type" -> kind.
_ST_MODEL_TYPES = {
    "SentenceTransformer": "embedding",
    "CrossEncoder": "cross-encoder",
    "SparseEncoder": "sparse",
    "MultiVectorEncoder": "multi-vector",
}
# A module type in modules.json that only one kind has (folders saved before "model_type" existed).
_MODULE_MARKERS = (
    ("sparse_encoder", "sparse"),
    ("SpladePooling", "sparse"),
    ("MLMTransformer", "sparse"),
    ("multi_vector_encoder", "multi-vector"),
)


def detect_kind(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> str:
    """The kind of job a checkpoint is for, from its files (no weights are read).

    In order: BGE-M3's head files (M3_FILES) beside the model; config_sentence_transformers.json's model_type
    (sentence-transformers 6); a module of
    modules.json that only SPLADE or multi-vector folders have; config.json's architectures, where
    *ForSequenceClassification is a cross-encoder; else an embedding model.

    Args:
        name_or_path: a local checkpoint folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, cache_dir, ...).

    Returns:
        One of KINDS: "embedding", "cross-encoder", "sparse", "multi-vector" or "m3".

    Raises:
        ValueError: a model_type sentence-transformers does not know, or a metadata file that is not
            the JSON it should be.
    """
    if has_m3_heads(name_or_path, hub_kwargs):
        return "m3"
    st_config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    model_type = st_config.get("model_type")
    if model_type is not None:
        if model_type not in _ST_MODEL_TYPES:
            known = ", ".join(_ST_MODEL_TYPES)
            raise ValueError(
                f"{name_or_path}: config_sentence_transformers.json has model_type {model_type!r}, not one of {known}"
            )
        return _ST_MODEL_TYPES[model_type]
    for module in read_model_json(name_or_path, "modules.json", hub_kwargs):
        for marker, kind in _MODULE_MARKERS:
            if marker in str(module.get("type", "")):
                return kind
    architectures = read_model_json(name_or_path, "config.json", hub_kwargs).get("architectures") or []
    if any(str(name).endswith("ForSequenceClassification") for name in architectures):
        return "cross-encoder"
    return "embedding"


def job_class(kind: str) -> type:
    """The job class that runs `kind` (imported here).

    Raises:
        ValueError: an unknown kind, naming the known ones.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    module, name = KINDS[kind]
    return getattr(importlib.import_module(module), name)


def load_job(kind: str, name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
    """`job_class(kind).from_pretrained(name_or_path, **kwargs)`.

    Args:
        kind: one of KINDS (detect_kind's answer, or a user's --task).
        name_or_path: a local checkpoint folder or a hub id.
        **kwargs: from_pretrained's options (device, dtype, quantize, max_length, hub options).

    Returns:
        The loaded job (an Embedder, CrossEncoder, SparseEncoder, MultiVectorEncoder or M3Encoder).

    Raises:
        ValueError: an unknown kind, or what from_pretrained raises (a checkpoint of the wrong kind).
    """
    return job_class(kind).from_pretrained(name_or_path, **kwargs)


def kind_of(job: object) -> str:
    """The kind of a loaded job, by its class (a subclass counts as its base); "embedding" for one
    of no known class (a stand-in with the Embedder's methods)."""
    names = {cls.__name__ for cls in type(job).__mro__}
    for kind, (_, name) in KINDS.items():
        if name in names:
            return kind
    return "embedding"
