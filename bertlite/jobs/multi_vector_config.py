"""A multi-vector (ColBERT) folder's settings, as sentence-transformers' MultiVectorEncoder reads them.

A native sentence-transformers save lists its modules in modules.json: Transformer (with
query_length, document_length and query_expansion in sentence_bert_config.json), a token-level
Dense projection, MultiVectorMask (the skiplist) and Normalize; prompts ("[Q] ", "[D] ") live in
config_sentence_transformers.json. Like st_config.py it imports no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bertlite.config import read_json_object
from bertlite.hub import resolve_file
from bertlite.jobs.st_config import read_max_length, read_model_json, read_sentence_transformers_prompts

# Activations a Dense config may name (sentence-transformers stores the class path); None: no activation.
DENSE_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": None,
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}
SIMILARITY_FN_NAMES = ("maxsim", "meanmaxsim")
# transformers' "no limit" for model_max_length: larger values mean the tokenizer sets none.
_NO_LIMIT = 10**12
_OTHER_JOBS = {
    "SentenceTransformer": "bertlite.Embedder",
    "CrossEncoder": "bertlite.CrossEncoder",
    "SparseEncoder": "bertlite.SparseEncoder",
}


@dataclass
class DenseSettings:
    """One Dense module: its folder and how it maps token vectors."""

    path: str
    in_features: int
    out_features: int
    bias: bool = True
    activation: str | None = "tanh"  # sentence-transformers' default when the config names none
    use_residual: bool = False


@dataclass
class MultiVectorSettings:
    """What a multi-vector folder says (None: not said; the model's defaults apply)."""

    steps: list[DenseSettings | str] = field(default_factory=list)  # Dense modules and "normalize", in order
    max_length: int | None = None  # max_seq_length, else the tokenizer's model_max_length
    query_length: int | None = None
    document_length: int | None = None
    query_expansion: dict[str, Any] | None = None  # {"strategy", "attend", "token", "length"}
    skiplist_words: list[str] = field(default_factory=list)
    skiplist_tasks: list[str] = field(default_factory=lambda: ["document"])
    keep_only_token_ids: list[int] | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str = "maxsim"
    truncate_dim: int | None = None


def read_multi_vector_settings(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> MultiVectorSettings:
    """Read a sentence-transformers MultiVectorEncoder folder's modules and settings.

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, cache_dir, ...).

    Returns:
        The settings.

    Raises:
        ValueError: a folder that is not a multi-vector checkpoint (an embedding model, a cross-encoder,
            a bare transformers folder), a module or setting bertlite does not implement, or a
            malformed file; each names the folder.
    """
    config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    modules = read_model_json(name_or_path, "modules.json", hub_kwargs)
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    _check_kind(name_or_path, config.get("model_type"), kinds, hub_kwargs)
    settings = MultiVectorSettings()
    for module, kind in zip(modules, kinds, strict=True):
        path = str(module.get("path", ""))
        if kind == "Transformer":
            if path:
                raise ValueError(f"{name_or_path}: the Transformer module must sit at the folder's root, not {path!r}")
            _read_transformer(name_or_path, settings, hub_kwargs)
        elif kind == "Dense":
            settings.steps.append(_read_dense(name_or_path, path, hub_kwargs))
        elif kind == "Normalize":
            normalized = read_model_json(name_or_path, f"{path}/config.json".lstrip("/"), hub_kwargs)
            _check_token_level(name_or_path, "Normalize", normalized)
            settings.steps.append("normalize")
        elif kind == "MultiVectorMask":
            _read_mask(name_or_path, path, settings, hub_kwargs)
        else:
            raise ValueError(
                f"{name_or_path}: modules.json has a {kind!r} module, which bertlite's MultiVectorEncoder does not "
                "implement (supported: Transformer, Dense, MultiVectorMask, Normalize)"
            )
    if not any(isinstance(step, DenseSettings) for step in settings.steps):
        raise ValueError(f"{name_or_path}: modules.json has no Dense projection; a ColBERT model needs one")
    settings.prompts, settings.default_prompt_name = read_sentence_transformers_prompts(name_or_path, **hub_kwargs)
    similarity = config.get("similarity_fn_name")
    if similarity is not None:
        if similarity not in SIMILARITY_FN_NAMES:
            raise ValueError(
                f"{name_or_path}: similarity_fn_name={similarity!r}; a multi-vector model scores with "
                f"{' or '.join(SIMILARITY_FN_NAMES)}"
            )
        settings.similarity_fn_name = similarity
    settings.truncate_dim = _positive(config.get("truncate_dim"), "truncate_dim", name_or_path)
    return settings


def _check_kind(name_or_path: str | os.PathLike, model_type: Any, kinds: list[str], hub_kwargs: dict) -> None:
    """Refuse a folder that is not a native sentence-transformers MultiVectorEncoder save, saying what it is."""
    if model_type == "ColBERT":
        raise ValueError(
            f"{name_or_path}: a PyLate (model_type 'ColBERT') checkpoint; bertlite reads the folders "
            "sentence-transformers' MultiVectorEncoder saves: load it there and save_pretrained it again"
        )
    if model_type is None and not kinds and _is_stanford_colbert(name_or_path, hub_kwargs):
        raise ValueError(
            f"{name_or_path}: a Stanford-NLP ColBERT checkpoint (HF_ColBERT); bertlite reads the folders "
            "sentence-transformers' MultiVectorEncoder saves: load it there and save_pretrained it again"
        )
    if model_type != "MultiVectorEncoder" and not (model_type is None and "MultiVectorMask" in kinds):
        what = f"a {model_type} checkpoint" if model_type else "not a multi-vector checkpoint"
        if model_type is None:
            what += " (no modules.json with a MultiVectorMask)" if kinds else " (no modules.json)"
        hint = _OTHER_JOBS.get(model_type or ("SentenceTransformer" if "Pooling" in kinds else ""), "")
        raise ValueError(
            f"{name_or_path}: {what}; MultiVectorEncoder needs a sentence-transformers MultiVectorEncoder "
            f"(ColBERT) folder" + (f"; load this one with {hint}" if hint else "")
        )


def _is_stanford_colbert(name_or_path: str | os.PathLike, hub_kwargs: dict) -> bool:
    path = resolve_file(name_or_path, "config.json", **hub_kwargs)
    return path is not None and "HF_ColBERT" in (read_json_object(path).get("architectures") or [])


def _read_transformer(name_or_path: str | os.PathLike, settings: MultiVectorSettings, hub_kwargs: dict) -> None:
    st_config = read_model_json(name_or_path, "sentence_bert_config.json", hub_kwargs)
    task = st_config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise ValueError(f"{name_or_path}: transformer_task={task!r}; bertlite runs 'feature-extraction' only")
    if st_config.get("processing_kwargs"):
        raise ValueError(f"{name_or_path}: sentence_bert_config.json processing_kwargs are not implemented")
    path = resolve_file(name_or_path, "tokenizer_config.json", **hub_kwargs)
    tokenizer_config = read_json_object(path) if path is not None else {}
    settings.max_length = read_max_length(name_or_path, hub_kwargs)
    settings.query_length = _positive(st_config.get("query_length"), "query_length", name_or_path)
    settings.document_length = _positive(st_config.get("document_length"), "document_length", name_or_path)
    settings.query_expansion = _query_expansion(st_config.get("query_expansion"), name_or_path)
    expansion = settings.query_expansion
    if expansion and expansion["token"] is None:
        # sentence-transformers expands with the tokenizer's mask token.
        mask = tokenizer_config.get("mask_token", "[MASK]")
        expansion["token"] = mask.get("content") if isinstance(mask, dict) else mask
    if expansion and settings.query_length is not None and settings.query_length < expansion["length"]:
        raise ValueError(
            f"{name_or_path}: query_length={settings.query_length} is smaller than query_expansion's "
            f"length {expansion['length']}"
        )


def _query_expansion(value: Any, name: str | os.PathLike) -> dict[str, Any] | None:
    if value is None:
        return None
    where = f"{name}: sentence_bert_config.json query_expansion"
    if not isinstance(value, dict) or set(value) - {"strategy", "attend", "token", "length"}:
        raise ValueError(f"{where} must be an object with strategy, attend, token and length, got {value!r:.80}")
    if value.get("strategy") not in ("fixed", "min"):
        raise ValueError(f"{where} strategy must be 'fixed' or 'min', got {value.get('strategy')!r}")
    attend = value.get("attend", False)
    if not isinstance(attend, bool):
        raise ValueError(f"{where} attend must be true or false, got {attend!r}")
    token = value.get("token")
    if token is not None and not isinstance(token, str):
        raise ValueError(f"{where} token must be a token string or null, got {token!r}")
    length = _positive(value.get("length"), "query_expansion length", name)
    if length is None:
        raise ValueError(f"{where} needs a length (the query width; classic ColBERT uses 32)")
    return {"strategy": value["strategy"], "attend": attend, "token": token, "length": length}


def _read_dense(name_or_path: str | os.PathLike, path: str, hub_kwargs: dict) -> DenseSettings:
    config = read_model_json(name_or_path, f"{path}/config.json".lstrip("/"), hub_kwargs)
    _check_token_level(name_or_path, "Dense", config)
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in DENSE_ACTIVATIONS:
        raise ValueError(
            f"{name_or_path}/{path}: Dense activation_function {activation!r} is not implemented "
            f"(supported: {', '.join(DENSE_ACTIVATIONS)})"
        )
    sizes = [_positive(config.get(key), f"Dense {key}", name_or_path) for key in ("in_features", "out_features")]
    if None in sizes:
        raise ValueError(f"{name_or_path}/{path}/config.json: Dense needs in_features and out_features")
    return DenseSettings(
        path=path,
        in_features=sizes[0],
        out_features=sizes[1],
        bias=bool(config.get("bias", True)),
        activation=DENSE_ACTIVATIONS[activation],
        use_residual=bool(config.get("use_residual", False)),
    )


# What sentence-transformers' MultiVectorEncoder reads for a module config without module_input_name.
_UNSET_INPUT = {"Dense": "token_embeddings", "Normalize": "sentence_embedding"}


def _check_token_level(name_or_path: str | os.PathLike, kind: str, config: dict) -> None:
    # A Dense or Normalize on sentence embeddings belongs to an embedding model, not to ColBERT. Unset, a
    # Dense maps token_embeddings (sentence-transformers' multi-vector default) and a Normalize sentence_embedding
    # (which leaves the token vectors as they are); an unset output name follows the input's.
    names = {"module_input_name": config.get("module_input_name", _UNSET_INPUT[kind])}
    names["module_output_name"] = config.get("module_output_name", names["module_input_name"])
    for key, name in names.items():
        if name != "token_embeddings":
            unset = "" if key in config else " (sentence-transformers' default when the config leaves it out)"
            raise ValueError(
                f"{name_or_path}: the {kind} module's {key} is {name!r}{unset}; a multi-vector model's modules "
                "map token_embeddings"
            )


def _read_mask(name_or_path: str | os.PathLike, path: str, settings: MultiVectorSettings, hub_kwargs: dict) -> None:
    config = read_model_json(name_or_path, f"{path}/config.json".lstrip("/"), hub_kwargs)
    words = config.get("skiplist_words") or []
    tasks = config.get("skiplist_tasks")
    tasks = [tasks] if isinstance(tasks, str) else (tasks if tasks is not None else ["document"])
    keep = config.get("keep_only_token_ids")
    valid = (
        isinstance(words, list)
        and all(isinstance(w, str) for w in words)
        and isinstance(tasks, list)
        and all(isinstance(t, str) for t in tasks)
        and (keep is None or (isinstance(keep, list) and all(isinstance(i, int) for i in keep)))
    )
    if not valid:
        raise ValueError(
            f"{name_or_path}/{path}/config.json: skiplist_words and skiplist_tasks must be lists of strings, "
            "keep_only_token_ids a list of ids or null"
        )
    settings.skiplist_words, settings.skiplist_tasks, settings.keep_only_token_ids = words, tasks, keep


def _positive(value: Any, key: str, name: str | os.PathLike) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name}: {key} must be a positive integer or null, got {value!r}")
    return value
