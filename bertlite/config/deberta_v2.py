"""DebertaV2Config: transformers' DebertaV2Config fields and defaults, validated.

DeBERTa-v2/v3 is BERT's post-norm encoder with disentangled attention: content-to-position (c2p) and
position-to-content (p2c) scores against a table of relative-position embeddings (log-bucketed past
position_buckets // 2). Importable without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bertlite.config.bert import BertConfig
from bertlite.config.checks import SUPPORTED_ACTIVATIONS, check_name

# BertConfig's fields DeBERTa has no form of: config.json keeps them only if it carried them.
NOT_DEBERTA_FIELDS = ("position_embedding_type", "use_cache", "is_decoder", "add_cross_attention", "classifier_dropout")
POSITION_ATTENTION_TYPES = ("c2p", "p2c")


@dataclass
class DebertaV2Config(BertConfig):
    """DeBERTa-v2's config (transformers' DebertaV2Config): BERT's fields with DeBERTa-v2's defaults and its own
    (relative_attention, max_relative_positions, position_buckets, share_att_key, pos_att_type, norm_rel_ebd,
    position_biased_input, pooler_*, legacy, and conv_kernel_size / conv_groups / conv_act: the convolution over the
    embeddings that deberta-v2-xlarge and -xxlarge add to the first layer's output)."""

    model_types: ClassVar[tuple[str, ...]] = ("deberta-v2", "deberta_v2")
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_DEBERTA_FIELDS
    vocab_size: int = 128100
    hidden_size: int = 1536
    num_hidden_layers: int = 24
    num_attention_heads: int = 24
    intermediate_size: int = 6144
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    pad_token_id: int | None = 0
    model_type: str = "deberta-v2"
    relative_attention: bool = False
    max_relative_positions: int = -1
    position_buckets: int = -1
    share_att_key: bool = False
    pos_att_type: str | list[str] | None = None
    norm_rel_ebd: str = "none"
    position_biased_input: bool = True
    pooler_dropout: float = 0.0
    pooler_hidden_act: str = "gelu"
    pooler_hidden_size: int | None = None
    cls_dropout: float | None = None
    legacy: bool = True
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_act: str = "tanh"

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        no_types = self.type_vocab_size == 0 and not isinstance(self.type_vocab_size, bool)
        if no_types:
            self.type_vocab_size = 1  # BERT's size check wants a positive table; 0 is DeBERTa's "none"
        try:
            super().__post_init__(num_labels, attn_implementation)
        finally:
            if no_types:
                self.type_vocab_size = 0
        if isinstance(self.pos_att_type, str):
            self.pos_att_type = [part.strip() for part in self.pos_att_type.lower().split("|")]
        unknown = [kind for kind in self.pos_att_type or () if kind not in POSITION_ATTENTION_TYPES]
        if unknown:
            raise ValueError(f"pos_att_type: {unknown!r} unknown (supported: c2p, p2c)")
        if self.pooler_hidden_size is None:
            self.pooler_hidden_size = self.hidden_size
        if self.pooler_hidden_size != self.hidden_size:
            raise ValueError(f"pooler_hidden_size={self.pooler_hidden_size!r} must be hidden_size={self.hidden_size}")
        self._check_conv()
        if "embedding_size" in self.extra and self.extra["embedding_size"] != self.hidden_size:
            raise ValueError(
                f"embedding_size={self.extra['embedding_size']!r} other than hidden_size is not implemented"
            )
        if self.is_decoder or self.add_cross_attention:
            raise ValueError("a DeBERTa-v2 model is an encoder: is_decoder and add_cross_attention must be false")

    @property
    def relative_span(self) -> int:
        """att_span: the relative distances the table covers each way (position_buckets, else max_relative_positions,
        else max_position_embeddings)."""
        if self.position_buckets > 0:
            return self.position_buckets
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings

    @property
    def max_relative_distance(self) -> int:
        """max_relative_positions, or max_position_embeddings where it is unset (< 1)."""
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings

    def _check_conv(self) -> None:
        """The convolution layer's fields, where conv_kernel_size turns it on."""
        if not self.conv_kernel_size:
            return
        supported = SUPPORTED_ACTIVATIONS
        check_name(self, "conv_act", supported, f"is not implemented (supported: {', '.join(supported)})")
        groups = self.conv_groups
        if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"conv_groups must be a positive integer, got {groups!r}")
        if self.hidden_size % groups:
            raise ValueError(f"conv_groups={groups} must divide hidden_size={self.hidden_size}")
        if self.conv_kernel_size % 2 == 0:
            # transformers pads (k - 1) // 2 on each side: an even kernel would shorten the sequence by one.
            raise ValueError(f"conv_kernel_size={self.conv_kernel_size!r}: the convolution layer takes an odd kernel")
