"""What makes a config valid: the fields' names, JSON types and ranges, checked as transformers' strict
BertConfig checks them, and reading config.json with errors that name the file.

Importable without torch, so tools can read and check a config cheaply.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bertlite.config.bert import BertConfig

# Names understood by bertlite.layers.activations.ACT2FN. Kept here (not derived from the
# torch module) so that validating a config never imports torch; a test checks
# the two lists agree.
SUPPORTED_ACTIVATIONS = (
    "gelu",
    "gelu_10",
    "gelu_accurate",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_python_tanh",
    "gelu_pytorch_tanh",
    "hardswish",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "sqrtsoftplus",
    "swish",
    "tanh",
)
# relative_key*: transformers 4.x only (v5 removed them and ignores the tensors).
SUPPORTED_POSITION_EMBEDDINGS = ("absolute", "relative_key", "relative_key_query")
BERT_MODEL_TYPES = ("bert",)
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")

CONFIG_NAME = "config.json"
# Weight files a folder holds without config.json when transformers.Trainer saved a model it does not know.
WEIGHTS_ONLY_FILES = ("model.safetensors", "pytorch_model.bin")
# transformers' internal telemetry keywords (pipeline and the Auto classes pass them): meaningless here.
TELEMETRY_KWARGS = ("_from_auto", "_from_pipeline", "_commit_hash", "trust_remote_code")
# transformers' private attention keys, which it ignores in a config dict (a config.json may carry them).
IGNORED_ATTENTION_KEYS = ("_attn_implementation", "_attn_implementation_internal")

# Fields by JSON type, checked as transformers' strict BertConfig checks them: a bool is not an int (nor
# "false" a bool, which would be truthy), and an int is a float (JSON writes 0.0 as 0). The string fields
# are checked against their lists of names. Floats must also be finite: json reads NaN and Infinity.
BOOL_FIELDS = (
    "use_cache",
    "is_decoder",
    "add_cross_attention",
    "tie_word_embeddings",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
)
FLOAT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps")
OPTIONAL_FLOAT_FIELDS = ("classifier_dropout",)
OPTIONAL_INT_FIELDS = ("pad_token_id", "bos_token_id")


# The sizes every tensor's shape is made of.
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's value; a ValueError naming the file for what is not JSON, UTF-8, or readable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from e
    except RecursionError as e:
        # json recurses once per level: "[[[[..." thousands deep exhausts the stack.
        raise ValueError(f"{path}: its JSON is nested too deeply to read") from e


def read_json_object(path: str | os.PathLike) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_types(config: BertConfig) -> None:
    """Refuse a field of the wrong JSON type by name, before any value check compares or indexes with it."""
    for name in BOOL_FIELDS:
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false (a JSON boolean), got {value!r}")
    for name in FLOAT_FIELDS + OPTIONAL_FLOAT_FIELDS:
        value = getattr(config, name)
        if value is None and name in OPTIONAL_FLOAT_FIELDS:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"{name} must be a number{' or null' if name in OPTIONAL_FLOAT_FIELDS else ''}, got {value!r}"
            )
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    for name in OPTIONAL_INT_FIELDS:
        value = getattr(config, name)
        if value is not None and not _is_int(value):
            raise ValueError(f"{name} must be an integer or null, got {value!r}")
    eos = config.eos_token_id
    if not (eos is None or _is_int(eos) or isinstance(eos, list) and all(_is_int(i) for i in eos)):
        raise ValueError(f"eos_token_id must be an integer, a list of integers or null, got {eos!r}")
    label2id = config.label2id
    if label2id is not None and not (
        isinstance(label2id, dict) and all(isinstance(k, str) and _is_int(v) for k, v in label2id.items())
    ):
        raise ValueError(f"label2id must map label names to ids (ints), got {label2id!r}")


def check_name(config: BertConfig, name: str, choices: tuple[str, ...], problem: str) -> None:
    """A field that names one of `choices`; `problem` ends the error."""
    value = getattr(config, name)
    if value not in choices:
        raise ValueError(f"{name}={value!r} {problem}")


def check_sizes(config: BertConfig) -> None:
    for name in SIZE_FIELDS:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if config.hidden_size % config.num_attention_heads != 0:
        raise ValueError(
            f"hidden_size={config.hidden_size} is not divisible by num_attention_heads={config.num_attention_heads}"
        )


# (field, whether a value is allowed, what the error says it must be), checked in this order.
VALUE_RANGES = (
    ("hidden_dropout_prob", lambda value: 0.0 <= value <= 1.0, "must be in [0, 1]"),
    ("attention_probs_dropout_prob", lambda value: 0.0 <= value <= 1.0, "must be in [0, 1]"),
    ("layer_norm_eps", lambda value: value > 0, "must be positive"),
    ("initializer_range", lambda value: value >= 0, "must be >= 0 (the std of initial weights)"),
)


def check_ranges(config: BertConfig) -> None:
    for name, allowed, requirement in VALUE_RANGES:
        value = getattr(config, name)
        if not allowed(value):
            raise ValueError(f"{name} {requirement}, got {value!r}")
    if config.pad_token_id is not None and not 0 <= config.pad_token_id < config.vocab_size:
        raise ValueError(
            f"pad_token_id={config.pad_token_id} is outside the vocabulary (vocab_size={config.vocab_size})"
        )


def check_head_fields(config: BertConfig) -> None:
    """The fields only the task heads read: problem_type (with the number of labels) and classifier_dropout."""
    if config.problem_type is not None:
        check_name(config, "problem_type", PROBLEM_TYPES, f"is not one of {PROBLEM_TYPES}")
    if config.problem_type == "single_label_classification" and len(config.id2label) == 1:
        raise ValueError(
            "problem_type='single_label_classification' needs num_labels > 1 "
            "(use num_labels=2 for binary classification, or problem_type='regression')"
        )
    if config.classifier_dropout is not None and not 0.0 <= config.classifier_dropout <= 1.0:
        raise ValueError(f"classifier_dropout must be in [0, 1] or None, got {config.classifier_dropout!r}")


# Decoder families users most often point an encoder library at; an architecture name also tells one.
DECODER_MODEL_TYPES = frozenset(
    ("gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_neox", "llama", "mistral", "mixtral", "phi", "phi3")
    + ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "falcon", "olmo", "olmo2", "smollm3", "granite")
)
DECODER_ARCHITECTURES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")


def check_encoder(config_dict: dict[str, Any], encoder_types: tuple[str, ...]) -> None:
    """Refuse a decoder's config.json (Qwen3, Gemma3, Mistral, ...) by its model_type: bertlite serves encoders.

    Args:
        config_dict: config.json's keys and values.
        encoder_types: the model_type values being read (their checkpoints may list a BertLMHeadModel).

    Raises:
        ValueError: naming the model_type (and the decoder architecture, where config.json lists one).
    """
    model_type = config_dict.get("model_type")
    if model_type in encoder_types:
        return
    architectures = config_dict.get("architectures")
    names = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
    decoders = [a for a in names if a.endswith(DECODER_ARCHITECTURES)]
    if model_type in DECODER_MODEL_TYPES or decoders:
        shown = f" ({decoders[0]})" if decoders else ""
        raise ValueError(
            f"model_type={model_type!r}{shown} is a decoder; bertlite serves encoders (BERT and its encoder "
            "families: docs/jobs.md lists them)"
        )


def names_original_code(value: Any, repos: tuple[str, ...], modules: tuple[str, ...], class_prefix: str) -> bool:
    """Whether an auto_map value (`[org/repo--]module.Class`) names a family's original code: one of its repos (or
    none), one of its modules, a class of its prefix.

    Args:
        value: an auto_map value.
        repos: the repos that hold the family's original code.
        modules: the original code's module names.
        class_prefix: its classes' common prefix ("New", "NomicBert").

    Returns:
        True for the family's own classes.
    """
    if not isinstance(value, str):
        return False
    repo, _, name = value.rpartition("--")
    module, _, cls = name.partition(".")
    return repo in ("", *repos) and module in modules and cls.startswith(class_prefix)


def check_own_code(auto_map: Any, path: str | os.PathLike) -> None:
    """Refuse a checkpoint whose config.json maps its model to code of its own (auto_map: NomicBERT's originals
    and other remote-code models typed "bert"): bertlite runs only its own classes, and reading such weights
    into them would give other numbers. A custom tokenizer alone (AutoTokenizer) is no refusal.

    Raises:
        ValueError: naming the file and the class the checkpoint's code defines.
    """
    if not isinstance(auto_map, dict):
        return
    code = {key: value for key, value in auto_map.items() if key != "AutoTokenizer"}
    if code:
        key, value = next(iter(code.items()))
        raise ValueError(
            f"{path}: auto_map names the checkpoint's own code ({key}: {value}); bertlite runs only the model "
            "classes it implements, never a checkpoint's code, and this model is not one of them"
        )
