"""NomicBertConfig: transformers' NomicBertConfig fields and defaults, validated.

NomicBERT is BERT's post-norm encoder with rotary positions (rope_parameters' rope_theta) instead of position
embeddings, a fused bias-free query|key|value and a SwiGLU feed-forward. Importable without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig

# BertConfig's fields NomicBERT has no form of: config.json keeps them only if it carried them.
NOT_NOMIC_FIELDS = ("position_embedding_type", "use_cache", "is_decoder", "add_cross_attention", "tie_word_embeddings")
# transformers' default rotary base for NomicBERT.
DEFAULT_ROPE_THETA = 1000.0


@dataclass
class NomicBertConfig(BertConfig):
    """NomicBERT's config (transformers' NomicBertConfig): BERT's fields with NomicBERT's defaults, head_dim (None:
    hidden_size // num_attention_heads, the only size transformers' module runs) and rope_parameters (rope_type
    "default" and rope_theta)."""

    model_types: ClassVar[tuple[str, ...]] = ("nomic_bert",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_NOMIC_FIELDS
    vocab_size: int = 30528
    hidden_act: str = "silu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 2048
    model_type: str = "nomic_bert"
    head_dim: int | None = None  # a field here, as transformers' config keeps it
    rope_parameters: dict[str, Any] | None = None

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        super().__post_init__(num_labels, attn_implementation)
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.head_dim != self.hidden_size // self.num_attention_heads:
            raise ValueError(
                f"head_dim={self.head_dim!r}: NomicBERT's heads split hidden_size={self.hidden_size} evenly "
                f"({self.hidden_size // self.num_attention_heads} each)"
            )
        if self.position_embedding_type != "absolute" or self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}: a "
                "NomicBERT model is an encoder with rotary positions"
            )
        given = self.rope_parameters
        if given is not None and not isinstance(given, dict):
            raise ValueError(f"rope_parameters must be an object (rope_type, rope_theta), got {given!r}")
        params = {"rope_type": "default", "rope_theta": DEFAULT_ROPE_THETA, **(given or {})}
        if params["rope_type"] != "default":
            raise ValueError(
                f"rope_parameters: rope_type={params['rope_type']!r} is not implemented (supported: default)"
            )
        theta = params["rope_theta"]
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
            raise ValueError(f"rope_parameters: rope_theta must be a positive number, got {theta!r}")
        self.rope_parameters = params

    @property
    def rope_theta(self) -> float:
        """The rotary base."""
        return float(self.rope_parameters["rope_theta"])
