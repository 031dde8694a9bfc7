"""sentence-transformers folder metadata: pooling, normalization, max length and prompts.

Reads modules.json, the Pooling module's config.json, sentence_bert_config.json and
config_sentence_transformers.json, so an Embedder gives the vectors
SentenceTransformer(...).encode gives. Like config.py it imports no torch (nor
sentence-transformers): the CLI and metadata checks use it without loading a model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from bertlite.config import read_json
from bertlite.errors import CheckpointNotFoundError
from bertlite.hub import is_local, resolve_file
from bertlite.tokenization import LARGE_INTEGER

POOLING_MODES = ("cls", "mean", "max", "pooler", "mean_sqrt_len")
# sentence-transformers concatenates the modes a Pooling config turns on, in this order.
_ST_POOLING_FLAGS = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
)
_ST_UNSUPPORTED_FLAGS = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
# sentence-transformers' names for the modes (its pooling_mode) where bertlite's differ.
_ST_POOLING_NAMES = {"mean_sqrt_len_tokens": "mean_sqrt_len"}
# Defaults when a folder has no sentence-transformers metadata (docs/embedding.md documents them).
DEFAULT_POOLING = "mean"
DEFAULT_NORMALIZE = False
# The files beside the model that make a folder BGE-M3's (its sparse and ColBERT heads): its dense vector is
# the first token's, normalized (FlagEmbedding's BGEM3FlagModel), when no sentence-transformers file says so.
M3_FILES = ("colbert_linear.pt", "sparse_linear.pt")


def read_model_json(name_or_path: str | os.PathLike, filename: str, hub_kwargs: dict[str, Any]) -> Any:
    """One JSON file of a model folder or hub repo.

    Args:
        name_or_path: the folder or hub id.
        filename: the file, relative to it.
        hub_kwargs: resolve_file's hub arguments.

    Returns:
        The file's object (a list of objects for modules.json), or {} when the model has no such file.

    Raises:
        ValueError: a file that is not JSON, or not the expected object or list, naming it.
    """
    path = resolve_file(name_or_path, filename, **hub_kwargs)
    if path is None:
        return {}
    data = read_json(path)
    if filename == "modules.json":
        if not isinstance(data, list) or not all(isinstance(module, dict) for module in data):
            raise ValueError(
                f"{path}: expected a JSON list of modules (objects with 'type' and 'path'), got {data!r:.80}"
            )
    elif not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


@dataclass
class SentenceTransformerSettings:
    """What a sentence-transformers folder says about pooling, normalization and length (None: not said)."""

    pooling: list[str] | None = None
    normalize: bool | None = None
    max_length: int | None = None
    include_prompt: bool = True  # False: sentence-transformers pools without the prompt's tokens


def read_sentence_transformers_settings(
    name_or_path: str | os.PathLike, **hub_kwargs: Any
) -> SentenceTransformerSettings:
    """Read a folder's sentence-transformers settings: modules.json, the Pooling module's config.json
    and sentence_bert_config.json.

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, cache_dir, ...).

    Returns:
        The settings: pooling modes, normalize (True with a Normalize module, False with modules.json
        but none, None without modules.json), max_length (read_max_length), include_prompt.

    Raises:
        ValueError: malformed files, a pooling mode or module bertlite does not implement (supported:
            Transformer, Pooling, Normalize), or an invalid max_seq_length.
    """
    settings = SentenceTransformerSettings()
    modules = read_model_json(name_or_path, "modules.json", hub_kwargs)
    settings.max_length = read_max_length(name_or_path, hub_kwargs)
    if not modules:
        if has_m3_heads(name_or_path, hub_kwargs):
            settings.pooling, settings.normalize = ["cls"], True
        return settings
    settings.normalize = False
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Pooling":
            pooling = read_model_json(name_or_path, f"{module.get('path', '')}/config.json".lstrip("/"), hub_kwargs)
            settings.pooling = _st_pooling_modes(pooling, name_or_path)
            include_prompt = pooling.get("include_prompt", True)
            if not isinstance(include_prompt, bool):
                raise ValueError(
                    f"{name_or_path}: pooling include_prompt must be true or false, got {include_prompt!r}"
                )
            settings.include_prompt = include_prompt
        elif kind == "Normalize":
            settings.normalize = True
        elif kind != "Transformer":
            raise ValueError(
                f"{name_or_path}: modules.json has a {kind!r} module, which bertlite does not implement "
                "(supported: Transformer, Pooling, Normalize)"
            )
    return settings


def has_m3_heads(name_or_path: str | os.PathLike, hub_kwargs: dict[str, Any]) -> bool:
    """Whether BGE-M3's head files (M3_FILES) are beside the model.

    A hub repo is looked up only when its config.json is XLM-RoBERTa's (BGE-M3's base), so no other model
    costs a request; a file that cannot be looked up (offline, not cached) counts as absent.

    Args:
        name_or_path: a local folder or a hub id.
        hub_kwargs: hub options of bertlite.hub.resolve_file.
    """
    if not is_local(name_or_path):
        if read_model_json(name_or_path, "config.json", hub_kwargs).get("model_type") != "xlm-roberta":
            return False
    try:
        return all(resolve_file(name_or_path, name, **hub_kwargs) is not None for name in M3_FILES)
    except CheckpointNotFoundError:
        return False


def read_max_length(name_or_path: str | os.PathLike, hub_kwargs: dict[str, Any]) -> int | None:
    """The max length sentence-transformers truncates a folder's texts at: sentence_bert_config.json's
    max_seq_length, else tokenizer_config.json's model_max_length (where sentence-transformers 5 and
    later save it).

    Args:
        name_or_path: a local folder or a hub id.
        hub_kwargs: hub options of bertlite.hub.resolve_file.

    Returns:
        The length; None: neither file says one (the model's max_position_embeddings applies).

    Raises:
        ValueError: an invalid max_seq_length.
    """
    st_config = read_model_json(name_or_path, "sentence_bert_config.json", hub_kwargs)
    length = check_max_seq_length(st_config.get("max_seq_length"), name_or_path)
    if length is not None:
        return length
    saved = read_model_json(name_or_path, "tokenizer_config.json", hub_kwargs).get("model_max_length")
    # transformers writes a huge number for "no limit"; the model's max_position_embeddings applies then
    if isinstance(saved, int) and not isinstance(saved, bool) and 1 <= saved < LARGE_INTEGER:
        return saved
    return None


def check_max_seq_length(value: Any, name: str | os.PathLike) -> int | None:
    """sentence_bert_config.json's max_seq_length: a positive int, or None for the model's maximum (as
    sentence-transformers reads null).

    Raises:
        ValueError: any other value, naming the model `name` and the value.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(
            f"{name}: sentence_bert_config.json has max_seq_length={value!r}; it must be a positive integer "
            "(or null for the model's maximum)"
        )
    return value


def read_sentence_transformers_prompts(
    name_or_path: str | os.PathLike, **hub_kwargs: Any
) -> tuple[dict[str, str], str | None]:
    """Read `prompts` and `default_prompt_name` from config_sentence_transformers.json.

    As SentenceTransformer does, "query" and "document" exist as empty prompts
    unless the file gives them, and a null prompt is an empty one.

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file.

    Returns:
        (prompts by name, default_prompt_name or None).

    Raises:
        ValueError: prompts that do not map names to strings, or a default_prompt_name not among them.
    """
    config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    saved = config.get("prompts") or {}
    if not isinstance(saved, dict) or not all(isinstance(v, str | None) for v in saved.values()):
        raise ValueError(f"{name_or_path}: config_sentence_transformers.json 'prompts' must map names to strings")
    prompts = {"query": "", "document": "", **{str(k): v or "" for k, v in saved.items()}}
    default = config.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ValueError(
            f"{name_or_path}: config_sentence_transformers.json default_prompt_name={default!r} "
            f"is not one of its prompts ({', '.join(sorted(prompts))})"
        )
    return prompts, default


def _st_pooling_modes(config: dict[str, Any], name: str | os.PathLike) -> list[str]:
    for flag in _ST_UNSUPPORTED_FLAGS:
        if config.get(flag):
            raise ValueError(f"{name}: pooling {flag} is not implemented (supported: {', '.join(POOLING_MODES)})")
    named = config.get("pooling_mode")  # newer sentence-transformers write the modes by name: one, or a list
    if named is not None:
        names = [named] if isinstance(named, str) else named
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{name}: pooling_mode must be a mode name or a list of them, got {named!r}")
        return [check_pooling(_ST_POOLING_NAMES.get(n, n)) for n in names]
    modes = [mode for flag, mode in _ST_POOLING_FLAGS if config.get(flag)]
    return modes or [DEFAULT_POOLING]


def check_pooling(mode: str) -> str:
    """`mode` if it is one of POOLING_MODES.

    Raises:
        ValueError: naming the mode and the known ones.
    """
    if mode not in POOLING_MODES:
        raise ValueError(f"pooling={mode!r} is not one of {', '.join(POOLING_MODES)}")
    return mode


# --- cross-encoders ---------------------------------------------------------------

# What config_sentence_transformers.json's model_type names, and the bertlite class that runs it.
_MODEL_CLASSES = {
    "SentenceTransformer": "an embedding model (use bertlite.Embedder)",
    "SparseEncoder": "a sparse embedding model (use bertlite.SparseEncoder)",
    "MultiVectorEncoder": "a multi-vector embedding model (use bertlite.MultiVectorEncoder)",
}


@dataclass
class CrossEncoderSettings:
    """What a cross-encoder folder says (None: not said).

    activation_fn: the dotted path of config_sentence_transformers.json's activation_fn (read only
    from a folder of sentence-transformers modules, as sentence-transformers reads it).
    """

    max_length: int | None = None
    activation_fn: str | None = None
    prompts: dict[str, str] | None = None
    default_prompt_name: str | None = None


def read_cross_encoder_settings(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> CrossEncoderSettings:
    """Read a cross-encoder folder's sentence-transformers files, as sentence-transformers' CrossEncoder does.

    A folder with modules.json must be a CrossEncoder of one Transformer module (sentence-classification
    task); one without is a plain transformers checkpoint. The max length is sentence_bert_config.json's
    max_seq_length, else tokenizer_config.json's model_max_length.

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file.

    Returns:
        The settings.

    Raises:
        ValueError: a folder of another sentence-transformers model type (an embedding model), other
            modules than one Transformer, another transformer_task, or malformed values.
    """
    settings = CrossEncoderSettings()
    st_config = read_model_json(name_or_path, "sentence_bert_config.json", hub_kwargs)
    settings.max_length = read_max_length(name_or_path, hub_kwargs)
    modules = read_model_json(name_or_path, "modules.json", hub_kwargs)
    if not modules:
        return settings
    config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    # sentence-transformers takes a folder without model_type for a SentenceTransformer (older saves).
    model_type = config.get("model_type", "SentenceTransformer")
    if model_type != "CrossEncoder":
        what = _MODEL_CLASSES.get(str(model_type), f"a {model_type!r} model")
        raise ValueError(f"{name_or_path} is {what}, not a cross-encoder (sequence-classification) model")
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    if kinds != ["Transformer"]:
        raise ValueError(
            f"{name_or_path}: modules.json has the modules {kinds}; bertlite's CrossEncoder runs one "
            "Transformer module (a sequence-classification model)"
        )
    task = st_config.get("transformer_task", "sequence-classification")
    if task != "sequence-classification":
        raise ValueError(
            f"{name_or_path}: sentence_bert_config.json has transformer_task={task!r}; bertlite's CrossEncoder "
            "runs 'sequence-classification' models"
        )
    activation = config.get("activation_fn")
    if activation is not None and not isinstance(activation, str):
        raise ValueError(f"{name_or_path}: config_sentence_transformers.json activation_fn must be a dotted path")
    settings.activation_fn = activation
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str | None) for v in prompts.values()):
        raise ValueError(f"{name_or_path}: config_sentence_transformers.json 'prompts' must map names to strings")
    settings.prompts = {str(k): v or "" for k, v in prompts.items()}
    default = config.get("default_prompt_name")
    if default is not None and default not in settings.prompts:
        raise ValueError(
            f"{name_or_path}: config_sentence_transformers.json default_prompt_name={default!r} "
            f"is not one of its prompts ({', '.join(sorted(settings.prompts)) or 'none'})"
        )
    settings.default_prompt_name = default
    return settings
