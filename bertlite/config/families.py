"""BERT's family: each member's config class (a BertConfig with its family's defaults) and its entry in
FAMILIES, the one table that says, by config.json's model_type, where a family's config, model classes and
tokenizer are. AutoConfig, the Auto models, AutoTokenizer and the jobs all read it; a new family adds its
config class here, its model module under bertlite/models/, and one Family row.
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


# The heads every family has beside its base model, after the family's class prefix (RobertaForMaskedLM, ...).
FAMILY_HEADS = ("Model", "ForSequenceClassification", "ForMaskedLM", "ForTokenClassification", "ForQuestionAnswering")


@dataclass(frozen=True)
class Family:
    """Where one model_type's parts are.

    Attributes:
        config_class: its config class.
        module: the module of its model classes (bertlite.models.bert holds BERT's through heads.MODEL_CLASSES).
        prefix: its class names' prefix: prefix + "Model", prefix + "ForMaskedLM", ...
        heads: its classes after the prefix, the base model ("Model") included.
        tokenizer_classes: tokenizer_config.json's tokenizer_class values that mean this family's tokenizer,
            whose tokenizer.json holds the whole pipeline and runs as it is.
    """

    config_class: type[BertConfig]
    module: str
    prefix: str
    heads: tuple[str, ...] = FAMILY_HEADS
    tokenizer_classes: tuple[str, ...] = ()


def _tokenizers(name: str) -> tuple[str, ...]:
    """transformers' slow and fast tokenizer class names for a family's `name`."""
    return (f"{name}Tokenizer", f"{name}TokenizerFast")


# model_type -> its family. BERT's heads are more than FAMILY_HEADS: the Auto classes take each class it has.
FAMILIES: dict[str, Family] = {
    "bert": Family(BertConfig, "bertlite.models.heads", "Bert", heads=()),
    "roberta": Family(RobertaConfig, "bertlite.models.roberta", "Roberta", tokenizer_classes=_tokenizers("Roberta")),
    "xlm-roberta": Family(
        XLMRobertaConfig, "bertlite.models.roberta", "XLMRoberta", tokenizer_classes=_tokenizers("XLMRoberta")
    ),
    "camembert": Family(
        CamembertConfig, "bertlite.models.roberta", "Camembert", tokenizer_classes=_tokenizers("Camembert")
    ),
}
# model_type -> its config class, for AutoConfig and the jobs.
CONFIG_CLASSES: dict[str, type[BertConfig]] = {model_type: f.config_class for model_type, f in FAMILIES.items()}
