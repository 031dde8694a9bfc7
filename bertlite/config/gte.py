"""GteConfig: transformers' GteConfig fields and defaults, validated.

GTE is BERT's post-norm encoder with rotary positions (rope_parameters' rope_theta) and a gated feed-forward;
type_vocab_size may be 0 (gte-base-en-v1.5: no token type embeddings). Importable without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig

# BertConfig's fields GTE has no form of: config.json keeps them only if it carried them.
NOT_GTE_FIELDS = ("position_embedding_type", "use_cache", "is_decoder", "add_cross_attention")
# transformers' default rotary base for GTE (GteConfig.default_theta).
DEFAULT_ROPE_THETA = 160_000.0


@dataclass
class GteConfig(BertConfig):
    """GTE's config (transformers' GteConfig): BERT's fields with GTE's defaults, and rope_parameters (rope_type
    "default" and rope_theta, the rotary base). type_vocab_size 0 means no token type embeddings."""

    model_types: ClassVar[tuple[str, ...]] = ("gte",)
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
        """rope_parameters with rope_type and rope_theta (GTE's default base when absent); only "default" runs."""
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
        theta = params["rope_theta"]
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
            raise ValueError(f"rope_parameters: rope_theta must be a positive number, got {theta!r}")
        self.rope_parameters = params

    @property
    def rope_theta(self) -> float:
        """The rotary base."""
        return float(self.rope_parameters["rope_theta"])

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """BertConfig.from_dict; BERT's keys GTE lacks (NOT_GTE_FIELDS) are read, then kept only if carried.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        config = super().from_dict(config_dict, **kwargs)
        data = {**config_dict, **kwargs}
        config.extra.update({key: data[key] for key in NOT_GTE_FIELDS if key in data})
        return config

    def to_dict(self) -> dict[str, Any]:
        """config.json's keys: BERT's and GTE's, without the fields GTE lacks (unless config.json carried them)."""
        out = super().to_dict()
        for key in NOT_GTE_FIELDS:
            if key not in self.extra:
                out.pop(key, None)
        return out
