"""The config classes of BERT's family: each a BertConfig with its family's defaults, and CONFIG_CLASSES,
which maps a config.json's model_type to its class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bertlite.config.bert import BertConfig


@dataclass
class RobertaConfig(BertConfig):
    """RoBERTa's config: BERT's fields, RoBERTa's defaults (transformers' RobertaConfig). The model differs
    from BERT only in its positions, counted from pad_token_id + 1 (bertlite.models.roberta)."""

    model_types: ClassVar[tuple[str, ...]] = ("roberta",)
    vocab_size: int = 50265
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    model_type: str = "roberta"

    @property
    def max_sequence_length(self) -> int:
        """max_position_embeddings less the rows up to pad_token_id, which no token's position uses (514 -> 512)."""
        return self.max_position_embeddings - (self.pad_token_id or 0) - 1


@dataclass
class XLMRobertaConfig(RobertaConfig):
    """XLM-RoBERTa's config (transformers' XLMRobertaConfig): RoBERTa's, another default vocabulary size."""

    model_types: ClassVar[tuple[str, ...]] = ("xlm-roberta",)
    vocab_size: int = 30522
    model_type: str = "xlm-roberta"


@dataclass
class CamembertConfig(RobertaConfig):
    """CamemBERT's config (transformers' CamembertConfig): RoBERTa's, another default vocabulary size."""

    model_types: ClassVar[tuple[str, ...]] = ("camembert",)
    vocab_size: int = 30522
    model_type: str = "camembert"


# model_type -> its config class, for AutoConfig and the jobs.
CONFIG_CLASSES: dict[str, type[BertConfig]] = {
    "bert": BertConfig,
    "roberta": RobertaConfig,
    "xlm-roberta": XLMRobertaConfig,
    "camembert": CamembertConfig,
}
