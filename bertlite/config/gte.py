"""GteConfig: transformers' GteConfig fields and defaults, validated.

GTE is BERT's post-norm encoder with rotary positions (rope_parameters' rope_theta) and a gated feed-forward;
type_vocab_size may be 0 (gte-base-en-v1.5: no token type embeddings). The original hub layout (model_type
"new", auto_map to Alibaba-NLP/new-impl's code) is read too: from_original_layout maps its fields onto these, its
fixed-NTK rope_scaling onto rope_type "ntk", and refuses by name what GTE's modules do not compute. Importable
without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig
from bertlite.config.checks import names_original_code

# BertConfig's fields GTE has no form of: config.json keeps them only if it carried them.
NOT_GTE_FIELDS = ("position_embedding_type", "use_cache", "is_decoder", "add_cross_attention")
# transformers' default rotary base for GTE (GteConfig.default_theta).
DEFAULT_ROPE_THETA = 160_000.0
# The original layout's model_type, and its config class's defaults where they differ from GteConfig's (a field
# config.json leaves out has the original's value).
ORIGINAL_MODEL_TYPE = "new"
ORIGINAL_DEFAULTS = {"vocab_size": 30528, "max_position_embeddings": 2048, "pad_token_id": None}
# The original's fields that choose its kernels (xformers, unpadding) or act only with logn_attention_scale: the
# outputs are the same without them.
ORIGINAL_KERNEL_FIELDS = ("unpad_inputs", "use_memory_efficient_attention", "logn_attention_clip1")
# The original's class names -> GTE's; its code's repo, which auto_map names.
ORIGINAL_CLASSES = {
    "NewModel": "GteModel",
    "NewForMaskedLM": "GteForMaskedLM",
    "NewForSequenceClassification": "GteForSequenceClassification",
    "NewForTokenClassification": "GteForTokenClassification",
}
ORIGINAL_CODE_REPO = "Alibaba-NLP/new-impl"


def _names_original_code(value: Any) -> bool:
    """Whether an auto_map value names the original's own classes (`[Alibaba-NLP/new-impl--]module.NewClass`)."""
    return names_original_code(value, (ORIGINAL_CODE_REPO,), ("configuration", "modeling"), "New")


def from_original_layout(config_dict: dict[str, Any]) -> dict[str, Any]:
    """config.json of the original layout (model_type "new") as GteConfig's fields.

    Args:
        config_dict: the original's config.json keys and values.

    Returns:
        The same config under GteConfig's names: rope_theta and rope_scaling in rope_parameters, the kernel
        switches dropped, auto_map dropped when it names only the original's classes (else kept, and refused
        by the loader's own-code check), architectures renamed.

    Raises:
        ValueError: a field whose computation GTE's modules do not have, named.
    """
    data = {**ORIGINAL_DEFAULTS, **config_dict, "model_type": "gte"}
    unsupported = {
        "position_embedding_type": (data.pop("position_embedding_type", "rope"), "rope"),
        "layer_norm_type": (data.pop("layer_norm_type", "layer_norm"), "layer_norm"),
        "pack_qkv": (data.pop("pack_qkv", True), True),
        "logn_attention_scale": (data.pop("logn_attention_scale", False), False),
    }
    for name, (value, supported) in unsupported.items():
        if value != supported:
            raise ValueError(f"model_type='new' with {name}={value!r} is not implemented (supported: {supported!r})")
    if "NewForMaskedLM" in (data.get("architectures") or []) and data.get("hidden_act", "gelu") != "gelu":
        # The original's masked-LM head applies hidden_act, transformers' GteLMHead (and so GTE's here) gelu.
        raise ValueError(f"model_type='new' NewForMaskedLM with hidden_act={data['hidden_act']!r} is not implemented")
    for name in ORIGINAL_KERNEL_FIELDS:
        data.pop(name, None)
    theta, scaling = data.pop("rope_theta", 10_000.0), data.pop("rope_scaling", None)
    data["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    if scaling is not None:
        if not isinstance(scaling, dict) or scaling.get("type") != "ntk" or set(scaling) - {"type", "factor"}:
            raise ValueError(f"rope_scaling={scaling!r} is not implemented (supported: {{'type': 'ntk', 'factor': f}})")
        data["rope_parameters"] = {"rope_type": "ntk", "rope_theta": theta, "factor": scaling.get("factor")}
    auto_map = data.get("auto_map")
    if isinstance(auto_map, dict) and all(_names_original_code(v) for k, v in auto_map.items() if k != "AutoTokenizer"):
        del data["auto_map"]
    if isinstance(data.get("architectures"), list):
        data["architectures"] = [ORIGINAL_CLASSES.get(name, name) for name in data["architectures"]]
    return data


@dataclass
class GteConfig(BertConfig):
    """GTE's config (transformers' GteConfig): BERT's fields with GTE's defaults, and rope_parameters (rope_type
    "default" and rope_theta, the rotary base; or rope_type "ntk" with its factor, the original layout's fixed-NTK
    scaling). type_vocab_size 0 means no token type embeddings."""

    model_types: ClassVar[tuple[str, ...]] = ("gte",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_GTE_FIELDS
    # The rotary base when rope_parameters has none (transformers' default_theta).
    default_rope_theta: ClassVar[float] = DEFAULT_ROPE_THETA
    vocab_size: int = 250048
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 8192
    type_vocab_size: int = 1
    pad_token_id: int | None = 1
    model_type: str = "gte"
    rope_parameters: dict[str, Any] | None = None

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        no_types = self.type_vocab_size == 0 and not isinstance(self.type_vocab_size, bool)
        if no_types:
            self.type_vocab_size = 1  # BERT's size check wants a positive table; 0 is GTE's "none"
        try:
            super().__post_init__(num_labels, attn_implementation)
        finally:
            if no_types:
                self.type_vocab_size = 0
        if self.position_embedding_type != "absolute" or self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}, "
                f"add_cross_attention={self.add_cross_attention!r}: a GTE model is an encoder with rotary positions"
            )
        self._init_rope()

    def _init_rope(self) -> None:
        """rope_parameters with rope_type and rope_theta (default_rope_theta when absent); "default" or "ntk"."""
        given = self.rope_parameters
        if given is not None and not isinstance(given, dict):
            raise ValueError(f"rope_parameters must be an object (rope_type, rope_theta), got {given!r}")
        params = dict(given or {})
        params.setdefault("rope_type", "default")
        params.setdefault("rope_theta", self.default_rope_theta)
        if params["rope_type"] not in ("default", "ntk"):
            raise ValueError(
                f"rope_parameters: rope_type={params['rope_type']!r} is not implemented (supported: default, ntk)"
            )
        theta = params["rope_theta"]
        if not _positive_number(theta):
            raise ValueError(f"rope_parameters: rope_theta must be a positive number, got {theta!r}")
        # The original scales the rotary base only past max_position_embeddings, so a factor below 1 would change
        # the frequencies with the text's length: not implemented.
        if params["rope_type"] == "ntk" and not (_positive_number(params.get("factor")) and params["factor"] >= 1):
            raise ValueError(f"rope_parameters: rope_type 'ntk' needs a factor >= 1, got {params.get('factor')!r}")
        self.rope_parameters = params

    @property
    def rope_theta(self) -> float:
        """The rotary base."""
        return float(self.rope_parameters["rope_theta"])

    @property
    def rope_ntk_factor(self) -> float:
        """The fixed-NTK scaling factor of rope_type "ntk"; 1.0 (no scaling) for "default"."""
        return float(self.rope_parameters.get("factor", 1.0)) if self.rope_parameters["rope_type"] == "ntk" else 1.0

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """BertConfig.from_dict; the original layout's config.json (model_type "new") is read through
        from_original_layout.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        if config_dict.get("model_type") == ORIGINAL_MODEL_TYPE:
            config_dict = from_original_layout(config_dict)
        return super().from_dict(config_dict, **kwargs)


def _positive_number(value: Any) -> bool:
    """Whether value is a finite number > 0 (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0
