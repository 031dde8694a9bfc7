"""EuroBertConfig: transformers' EuroBertConfig fields and defaults, validated.

EuroBERT is a Llama-style bidirectional encoder: pre-norm RMSNorm layers, rotary positions, grouped-query
attention (num_key_value_heads), a SwiGLU feed-forward, a final norm and no pooler or token types. Its own names
for two of BERT's fields (rms_norm_eps, attention_dropout) are its fields here; BERT's fields it lacks are kept
out of config.json unless it carried them. Importable without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig

# BertConfig's fields EuroBERT has no form of: config.json keeps them only if it carried them.
NOT_EUROBERT_FIELDS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "layer_norm_eps",
    "type_vocab_size",
    "position_embedding_type",
    "classifier_dropout",
    "is_decoder",
    "add_cross_attention",
)
CLASSIFIER_POOLING = ("bos", "mean", "late")
# transformers' default rotary base for EuroBERT.
DEFAULT_ROPE_THETA = 10_000.0


@dataclass
class EuroBertConfig(BertConfig):
    """EuroBERT's config (transformers' EuroBertConfig).

    Its own fields: num_key_value_heads (grouped-query attention; None: num_attention_heads), head_dim (None:
    hidden_size // num_attention_heads), rms_norm_eps, attention_dropout, attention_bias, mlp_bias,
    rope_parameters (rope_type "default" and rope_theta), mask_token_id, the sequence classifier's
    classifier_pooling ("bos", "mean" or "late": the mean of every real token's logits), and pretraining_tp,
    kept for config.json.
    """

    model_types: ClassVar[tuple[str, ...]] = ("eurobert",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_EUROBERT_FIELDS
    vocab_size: int = 128256
    hidden_act: str = "silu"
    max_position_embeddings: int = 8192
    pad_token_id: int | None = 128001
    bos_token_id: int | None = 128000
    eos_token_id: int | list[int] | None = 128001
    tie_word_embeddings: bool = False
    model_type: str = "eurobert"
    num_key_value_heads: int | None = None
    head_dim: int | None = None  # a field here: EuroBERT may set it apart from hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    attention_dropout: float = 0.0
    attention_bias: bool = False
    mlp_bias: bool = False
    rope_parameters: dict[str, Any] | None = None
    mask_token_id: int = 128002
    classifier_pooling: str = "late"
    pretraining_tp: int = 1

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        super().__post_init__(num_labels, attn_implementation)
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        for name in ("num_key_value_heads", "head_dim", "mask_token_id", "pretraining_tp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0 and name != "mask_token_id":
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        for name in ("attention_bias", "mlp_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false (a JSON boolean), got {getattr(self, name)!r}")
        if not _is_number(self.rms_norm_eps) or self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps must be a positive number, got {self.rms_norm_eps!r}")
        if not _is_number(self.attention_dropout) or not 0.0 <= self.attention_dropout <= 1.0:
            raise ValueError(f"attention_dropout must be a number in [0, 1], got {self.attention_dropout!r}")
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise ValueError(f"classifier_pooling={self.classifier_pooling!r} is not one of {CLASSIFIER_POOLING}")
        if self.position_embedding_type != "absolute" or self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}: a "
                "EuroBERT model is an encoder with rotary positions"
            )
        self._init_rope()

    def _init_rope(self) -> None:
        """rope_parameters with rope_type and rope_theta (the default base when absent); only "default" runs."""
        given = self.rope_parameters
        if given is not None and not isinstance(given, dict):
            raise ValueError(f"rope_parameters must be an object (rope_type, rope_theta), got {given!r}")
        params = dict(given or {})
        params.setdefault("rope_type", "default")
        params.setdefault("rope_theta", DEFAULT_ROPE_THETA)
        if params["rope_type"] != "default":
            raise ValueError(
                f"rope_parameters: rope_type={params['rope_type']!r} is not implemented (supported: default)"
            )
        if not _is_number(params["rope_theta"]) or params["rope_theta"] <= 0:
            raise ValueError(f"rope_parameters: rope_theta must be a positive number, got {params['rope_theta']!r}")
        self.rope_parameters = params

    @property
    def rope_theta(self) -> float:
        """The rotary base."""
        return float(self.rope_parameters["rope_theta"])

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """BertConfig.from_dict, transformers' legacy rope_theta read into rope_parameters.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        data = {**config_dict, **kwargs}
        if "rope_theta" in data and data.get("rope_parameters") is None:
            data["rope_parameters"] = {"rope_type": "default", "rope_theta": data.pop("rope_theta")}
        return super().from_dict(data)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
