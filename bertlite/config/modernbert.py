"""ModernBertConfig: transformers' ModernBertConfig fields and defaults, validated.

ModernBERT names four of BERT's fields its own way (hidden_activation, norm_eps, attention_dropout,
embedding_dropout); they are constructor arguments and attributes, held in BertConfig's fields so the shared
code (checks, loading, the jobs) reads BERT's names, and config.json is written with ModernBERT's keys.
Importable without torch.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import InitVar, dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig
from bertlite.config.checks import IGNORED_ATTENTION_KEYS, SUPPORTED_ACTIVATIONS

# ModernBERT's field names -> the BertConfig fields that hold them.
MODERNBERT_NAMES = {
    "hidden_activation": "hidden_act",
    "norm_eps": "layer_norm_eps",
    "attention_dropout": "attention_probs_dropout_prob",
    "embedding_dropout": "hidden_dropout_prob",
}
# BertConfig's fields ModernBERT has no form of: config.json keeps them only if it carried them.
NOT_MODERNBERT_FIELDS = ("type_vocab_size", "position_embedding_type", "use_cache", "is_decoder", "add_cross_attention")
# transformers' older keys, read into layer_types and rope_parameters (global_attn_every_n_layers is kept, as there).
LEGACY_KEYS = ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta", "rope_scaling")
LAYER_TYPES = ("full_attention", "sliding_attention")
# transformers' default rotary bases: global (full) attention layers, local (sliding window) ones.
DEFAULT_ROPE_THETA = {"full_attention": 160_000.0, "sliding_attention": 10_000.0}
CLASSIFIER_POOLING = ("cls", "mean")
BOOL_FIELDS = (
    "norm_bias",
    "attention_bias",
    "mlp_bias",
    "decoder_bias",
    "classifier_bias",
    "deterministic_flash_attn",
    "sparse_prediction",
)


@dataclass
class ModernBertConfig(BertConfig):
    """ModernBERT's config (transformers' ModernBertConfig).

    Its own fields: layer_types (each layer's "full_attention" or "sliding_attention"; from
    global_attn_every_n_layers, default 3, when absent), rope_parameters (each layer type's rotary base),
    local_attention (the sliding window's total width: a token sees local_attention // 2 tokens each side),
    the biases (attention_bias, mlp_bias, norm_bias, decoder_bias, classifier_bias), mlp_dropout, the
    classifier's pooling ("cls" or "mean") and activation, and transformers' fields kept for config.json.
    """

    model_types: ClassVar[tuple[str, ...]] = ("modernbert",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_MODERNBERT_FIELDS
    # BERT's name -> ModernBERT's (transformers' attribute_map, completed): parity and load errors name them so.
    attribute_map: ClassVar[dict[str, str]] = {field_name: name for name, field_name in MODERNBERT_NAMES.items()}
    vocab_size: int = 50368
    hidden_size: int = 768
    num_hidden_layers: int = 22
    intermediate_size: int = 1152
    max_position_embeddings: int = 8192
    layer_norm_eps: float = 1e-5
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    pad_token_id: int | None = 50283
    bos_token_id: int | None = 50281
    eos_token_id: int | list[int] | None = 50282
    classifier_dropout: float | None = 0.0
    model_type: str = "modernbert"
    initializer_cutoff_factor: float = 2.0
    norm_bias: bool = False
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282
    attention_bias: bool = False
    layer_types: list[str] | None = None
    rope_parameters: dict[str, dict[str, Any]] | None = None
    local_attention: int = 128
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    deterministic_flash_attn: bool = False
    sparse_prediction: bool = False
    sparse_pred_ignore_index: int = -100
    # ModernBERT's names as constructor arguments (None: BERT's field keeps its default); attributes after.
    hidden_activation: InitVar[str | None] = None
    norm_eps: InitVar[float | None] = None
    attention_dropout: InitVar[float | None] = None
    embedding_dropout: InitVar[float | None] = None
    # transformers' older keys (LEGACY_KEYS).
    global_attn_every_n_layers: InitVar[int | None] = None
    global_rope_theta: InitVar[float | None] = None
    local_rope_theta: InitVar[float | None] = None
    rope_scaling: InitVar[dict[str, Any] | None] = None

    def __post_init__(
        self,
        num_labels: int | None,
        attn_implementation: str | None,
        *values: Any,
    ) -> None:
        names, legacy = (
            values[: len(MODERNBERT_NAMES)],
            dict(zip(LEGACY_KEYS, values[len(MODERNBERT_NAMES) :], strict=True)),
        )
        for name, value in zip(MODERNBERT_NAMES, names, strict=True):
            if value is not None:
                setattr(self, MODERNBERT_NAMES[name], value)
        try:
            super().__post_init__(num_labels, attn_implementation)
            self._check_own_fields()
            self._init_layer_types(legacy["global_attn_every_n_layers"])
            self._init_rope(legacy["global_rope_theta"], legacy["local_rope_theta"], legacy["rope_scaling"])
        except ValueError as e:
            raise ValueError(_modernbert_names(str(e))) from None

    def _check_own_fields(self) -> None:
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false (a JSON boolean), got {getattr(self, name)!r}")
        if not _is_number(self.mlp_dropout) or not 0.0 <= self.mlp_dropout <= 1.0:
            raise ValueError(f"mlp_dropout must be a number in [0, 1], got {self.mlp_dropout!r}")
        if not _is_number(self.initializer_cutoff_factor) or self.initializer_cutoff_factor <= 0:
            raise ValueError(
                f"initializer_cutoff_factor must be a positive number, got {self.initializer_cutoff_factor!r}"
            )
        self._check_token_fields()
        if not _is_int(self.local_attention) or self.local_attention < 2:
            raise ValueError(
                f"local_attention must be an integer >= 2 (the sliding window's width), got {self.local_attention!r}"
            )
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise ValueError(f"classifier_pooling={self.classifier_pooling!r} is not one of {CLASSIFIER_POOLING}")
        if self.classifier_activation not in SUPPORTED_ACTIVATIONS:
            raise ValueError(
                f"classifier_activation={self.classifier_activation!r} is not implemented "
                f"(supported: {', '.join(SUPPORTED_ACTIVATIONS)})"
            )
        if self.position_embedding_type != "absolute" or self.is_decoder:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}: a "
                "ModernBERT model is an encoder with rotary positions"
            )

    def _check_token_fields(self) -> None:
        for name in ("cls_token_id", "sep_token_id"):
            value = getattr(self, name)
            if value is not None and not _is_int(value):
                raise ValueError(f"{name} must be an integer or null, got {value!r}")
        if not _is_int(self.sparse_pred_ignore_index):
            raise ValueError(f"sparse_pred_ignore_index must be an integer, got {self.sparse_pred_ignore_index!r}")

    def _init_layer_types(self, every_n: int | None) -> None:
        """layer_types from global_attn_every_n_layers when absent (every n-th layer global, from layer 0)."""
        if every_n is not None:
            if not _is_int(every_n) or every_n < 1:
                raise ValueError(f"global_attn_every_n_layers must be a positive integer, got {every_n!r}")
            self.extra["global_attn_every_n_layers"] = every_n  # transformers keeps the key in config.json
        if self.layer_types is None:
            n = 3 if every_n is None else every_n
            self.layer_types = [LAYER_TYPES[bool(i % n)] for i in range(self.num_hidden_layers)]
        types = self.layer_types
        if (
            not isinstance(types, list)
            or len(types) != self.num_hidden_layers
            or any(t not in LAYER_TYPES for t in types)
        ):
            raise ValueError(
                f"layer_types must list one of {LAYER_TYPES} for each of the {self.num_hidden_layers} layers, "
                f"got {types!r}"
            )

    def _init_rope(self, global_theta: float | None, local_theta: float | None, scaling: dict | None) -> None:
        """rope_parameters with both layer types and their rope_theta (the legacy keys' values, else defaults)."""
        given = self.rope_parameters
        if given is not None and not isinstance(given, dict):
            raise ValueError(f"rope_parameters must map layer types to their rotary settings, got {given!r}")
        params = {key: dict(value or {}) for key, value in (given or {}).items()}
        legacy_theta = {"full_attention": global_theta, "sliding_attention": local_theta}
        for layer_type in LAYER_TYPES:
            entry = params.setdefault(layer_type, {})
            entry.update(scaling or {})
            entry.setdefault("rope_type", "default")
            theta = legacy_theta[layer_type]
            entry.setdefault("rope_theta", DEFAULT_ROPE_THETA[layer_type] if theta is None else theta)
            if entry["rope_type"] != "default":
                raise ValueError(
                    f"rope_parameters[{layer_type!r}]: rope_type={entry['rope_type']!r} is not implemented "
                    "(supported: default)"
                )
            if not _is_number(entry["rope_theta"]) or not entry["rope_theta"] > 0:
                raise ValueError(
                    f"rope_parameters[{layer_type!r}]: rope_theta must be a positive number, "
                    f"got {entry['rope_theta']!r}"
                )
        unknown = sorted(set(params) - set(LAYER_TYPES))
        if unknown:
            raise ValueError(f"rope_parameters has keys {unknown}, not layer types {LAYER_TYPES}")
        self.rope_parameters = params

    @property
    def sliding_window(self) -> int:
        """The tokens a sliding-window layer sees on each side: local_attention // 2, as transformers'."""
        return self.local_attention // 2

    def rope_theta(self, layer_type: str) -> float:
        """The rotary base of a layer type ("full_attention" or "sliding_attention")."""
        return float(self.rope_parameters[layer_type]["rope_theta"])

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """Build from config.json's keys: ModernBERT's names held in BERT's fields, the legacy keys read into
        layer_types and rope_parameters, BERT's keys ModernBERT lacks kept as keys config.json carries.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        data = {**config_dict, **kwargs}
        # BERT's names are no ModernBERT fields (transformers' model never reads layer_norm_eps): kept as keys only.
        carried = {key: data.pop(key) for key in (*NOT_MODERNBERT_FIELDS, *MODERNBERT_NAMES.values()) if key in data}
        data = _bert_names(data)
        data.pop("reference_compile", None)  # transformers drops it too: its own torch.compile switch
        legacy = {key: data.pop(key) for key in LEGACY_KEYS if key in data}
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"} | {"num_labels", "attn_implementation"}
        init = {key: value for key, value in data.items() if key in known}
        extra = {key: value for key, value in data.items() if key not in known and key not in IGNORED_ATTENTION_KEYS}
        return cls(**init, **legacy, extra={**extra, **carried})

    def update_from_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """BertConfig.update_from_kwargs, ModernBERT's names (norm_eps=, ...) taken as their fields."""
        return super().update_from_kwargs(_bert_names(kwargs))

    def to_dict(self) -> dict[str, Any]:
        """config.json's keys: ModernBERT's names for BERT's fields, without the fields ModernBERT lacks."""
        out = super().to_dict()
        for name, field_name in MODERNBERT_NAMES.items():
            out[name] = getattr(self, field_name)
            if field_name not in self.extra:  # else config.json carried BERT's key too, written back as it was
                out.pop(field_name)
        return dict(sorted(out.items()))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _bert_names(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with ModernBERT's names as BERT's fields (MODERNBERT_NAMES)."""
    out = dict(values)
    for name, field_name in MODERNBERT_NAMES.items():
        if name in out:
            out[field_name] = out.pop(name)
    return out


def _modernbert_names(message: str) -> str:
    """A config error naming ModernBERT's fields (norm_eps, not layer_norm_eps)."""
    for name, field_name in MODERNBERT_NAMES.items():
        message = re.sub(rf"\b{field_name}\b", name, message)
    return message


def _alias(field_name: str) -> property:
    """ModernBERT's name for a BERT field, read and written through it (transformers' attribute_map)."""
    return property(lambda self: getattr(self, field_name), lambda self, value: setattr(self, field_name, value))


for _name, _field_name in MODERNBERT_NAMES.items():
    setattr(ModernBertConfig, _name, _alias(_field_name))
# The legacy keys are constructor arguments only: as attributes they read config.json's keys (extra), if given.
for _name in LEGACY_KEYS:
    delattr(ModernBertConfig, _name)
