"""Every job's sentence-transformers folder, read: what SentenceTransformer, CrossEncoder, SparseEncoder and
MultiVectorEncoder read from modules.json, the modules' config.json files, sentence_bert_config.json,
config_sentence_transformers.json and tokenizer_config.json.

Each reader refuses what its job does not implement by name. Like config.py this imports no torch (nor
sentence-transformers): the CLI and metadata checks use it without loading a model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bertlite.config import read_json, read_json_object
from bertlite.errors import CheckpointError, CheckpointNotFoundError
from bertlite.hub import is_local, resolve_file, resolve_optional_file
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
        The file's object (a list of objects for modules.json), or {} when the model has no such file; {} too
        for a file other than config.json that is not cached while offline, as sentence-transformers reads it.

    Raises:
        ValueError: a file that is not JSON, or not the expected object or list, naming it.
    """
    # config.json is the one file every model has: offline and not cached, its error names the repo.
    resolve = resolve_file if filename == "config.json" else resolve_optional_file
    path = resolve(name_or_path, filename, **hub_kwargs)
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


# --- SPLADE (SparseEncoder) ---------------------------------------------------------

SPLADE_POOLING = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")
SPLADE_SIMILARITY_FUNCTIONS = ("dot", "cosine", "euclidean", "manhattan")
SIMILARITY_FUNCTIONS = SPLADE_SIMILARITY_FUNCTIONS  # the name bertlite.jobs.sparse_config gave it
# The input module of a SPLADE model: the legacy MLMTransformer, or Transformer with transformer_task fill-mask.
_MLM_MODULES = ("MLMTransformer", "Transformer")
EMBEDDER_HINT = "for dense sentence vectors load it with bertlite.Embedder"


@dataclass
class SpladeSettings:
    """What a SPLADE folder says (None: not said; sentence-transformers' defaults apply)."""

    pooling_strategy: str = "max"
    activation_function: str = "relu"
    max_active_dims: int | None = None
    max_length: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str | None = None


def read_splade_settings(
    name_or_path: str | os.PathLike, architectures: list[str], **hub_kwargs: Any
) -> SpladeSettings:
    """Read a SPLADE folder's settings, as sentence_transformers.SparseEncoder(name_or_path) reads them.

    A folder without modules.json is what SparseEncoder builds by default: with a ...ForMaskedLM
    architecture, MLM logits and SpladePooling("max").

    Args:
        name_or_path: a local folder or a hub id.
        architectures: config.json's architectures (the default modules depend on them).
        **hub_kwargs: hub options of bertlite.hub.resolve_file.

    Returns:
        The settings.

    Raises:
        CheckpointError: not a SPLADE model (a dense embedding model, an inference-free or CSR sparse
            model: a Router, SparseStaticEmbedding, SparseAutoEncoder module, ...), naming what it is.
        ValueError: malformed files or values.
    """
    settings = SpladeSettings()
    modules = read_model_json(name_or_path, "modules.json", hub_kwargs)
    st_config = read_model_json(name_or_path, "sentence_bert_config.json", hub_kwargs)
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    if not modules and not any(a.endswith("ForMaskedLM") for a in architectures):
        raise CheckpointError(
            f"{name_or_path} is not a SPLADE checkpoint: it has no MLM head weights (config.json architectures "
            f"{architectures or 'missing'}, no ...ForMaskedLM) and no modules.json; {EMBEDDER_HINT}"
        )
    if modules:
        _check_modules(name_or_path, kinds, st_config.get("transformer_task"))
        pooling = read_model_json(name_or_path, f"{modules[1].get('path', '')}/config.json".lstrip("/"), hub_kwargs)
        settings.pooling_strategy = _choice(name_or_path, pooling, "pooling_strategy", SPLADE_POOLING, "max")
        settings.activation_function = _choice(name_or_path, pooling, "activation_function", SPLADE_ACTIVATIONS, "relu")
    settings.max_length = read_max_length(name_or_path, hub_kwargs)
    config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    settings.max_active_dims = check_max_active_dims(config.get("max_active_dims"), f"{name_or_path}: max_active_dims")
    similarity = config.get("similarity_fn_name")
    if similarity is not None and similarity not in SPLADE_SIMILARITY_FUNCTIONS:
        raise ValueError(
            f"{name_or_path}: config_sentence_transformers.json similarity_fn_name={similarity!r} is not "
            f"implemented (supported: {', '.join(SPLADE_SIMILARITY_FUNCTIONS)})"
        )
    settings.similarity_fn_name = similarity
    settings.prompts, settings.default_prompt_name = read_sentence_transformers_prompts(name_or_path, **hub_kwargs)
    return settings


def check_max_active_dims(value: Any, name: str = "max_active_dims") -> int | None:
    """None, or an int >= 1 (sentence-transformers' rule).

    Raises:
        ValueError: naming `name` and the value.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer (or None for no limit), got {value!r}")
    return value


def _check_modules(name: str | os.PathLike, kinds: list[str], transformer_task: Any) -> None:
    """modules.json must be [MLM transformer, SpladePooling], as a plain SPLADE folder's."""
    for kind in kinds:
        if kind in ("Router", "SparseStaticEmbedding", "SparseAutoEncoder"):
            raise CheckpointError(
                f"{name}: modules.json has a {kind} module (an inference-free or CSR sparse model), which "
                "bertlite's SparseEncoder does not implement (supported: an MLM Transformer, then SpladePooling)"
            )
    mlm = kinds[:1] == ["MLMTransformer"] or (kinds[:1] == ["Transformer"] and transformer_task == "fill-mask")
    if kinds[1:] == ["SpladePooling"] and mlm:
        return
    if "SpladePooling" not in kinds:
        raise CheckpointError(
            f"{name} is not a SPLADE checkpoint: it has no MLM head weights (its modules.json has "
            f"{', '.join(kinds)}: a dense embedding model, no fill-mask Transformer nor SpladePooling); {EMBEDDER_HINT}"
        )
    raise CheckpointError(
        f"{name}: modules.json has {', '.join(kinds)}, which bertlite's SparseEncoder does not implement "
        "(supported: an MLMTransformer or fill-mask Transformer, then SpladePooling)"
    )


def _choice(name: str | os.PathLike, config: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = config.get(key, default)
    if value not in allowed:
        raise ValueError(f"{name}: SpladePooling {key}={value!r} must be one of {', '.join(allowed)}")
    return value


# --- multi-vector (MultiVectorEncoder) ------------------------------------------------

# Activations a Dense config may name (sentence-transformers stores the class path); None: no activation.
DENSE_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": None,
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}
SIMILARITY_FN_NAMES = ("maxsim", "meanmaxsim")
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
    path = resolve_optional_file(name_or_path, "tokenizer_config.json", **hub_kwargs)
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
