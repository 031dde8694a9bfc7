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


@dataclass
class ElectraConfig(BertConfig):
    """ELECTRA's config (transformers' ElectraConfig): BERT's fields with ELECTRA-small's defaults, and
    embedding_size, the embeddings' width, projected to hidden_size when the two differ (bertlite.models.electra).
    The summary_* fields are transformers' (its multiple-choice head reads them), kept so config.json keeps them."""

    model_types: ClassVar[tuple[str, ...]] = ("electra",)
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    model_type: str = "electra"
    embedding_size: int = 128
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float = 0.1

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        super().__post_init__(num_labels, attn_implementation)
        size = self.embedding_size
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"embedding_size must be a positive integer, got {size!r}")
        if not isinstance(self.summary_use_proj, bool):
            raise ValueError(f"summary_use_proj must be true or false (a JSON boolean), got {self.summary_use_proj!r}")
        for name in ("summary_type", "summary_activation"):
            value = getattr(self, name)
            if not (isinstance(value, str) or value is None and name == "summary_activation"):
                raise ValueError(f"{name} must be a string, got {value!r}")
        dropout = self.summary_last_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"summary_last_dropout must be a number in [0, 1], got {dropout!r}")


# The relative distances' buckets transformers' MPNet computes, whatever relative_attention_num_buckets says
# (MPNetEncoder.compute_position_bias's default): the table needs at least this many rows.
MPNET_POSITION_BUCKETS = 32


@dataclass
class MPNetConfig(BertConfig):
    """MPNet's config (transformers' MPNetConfig): BERT's fields, MPNet's defaults, and relative_attention_num_buckets,
    the rows of the relative attention bias every layer shares (bertlite.models.mpnet). MPNet has no token types;
    its positions count from 2, as RoBERTa's."""

    model_types: ClassVar[tuple[str, ...]] = ("mpnet",)
    vocab_size: int = 30527
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    model_type: str = "mpnet"
    relative_attention_num_buckets: int = MPNET_POSITION_BUCKETS

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        super().__post_init__(num_labels, attn_implementation)
        if self.position_embedding_type != "absolute" or self.is_decoder:
            # BERT's fields that MPNet's model has no form of: its positions are absolute plus the relative bias.
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}: an MPNet "
                "model is an encoder with absolute positions (and its relative attention bias)"
            )
        buckets = self.relative_attention_num_buckets
        if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < MPNET_POSITION_BUCKETS:
            raise ValueError(
                f"relative_attention_num_buckets must be an integer >= {MPNET_POSITION_BUCKETS} (MPNet puts every "
                f"distance in one of {MPNET_POSITION_BUCKETS} rows of the table), got {buckets!r}"
            )

    @property
    def max_sequence_length(self) -> int:
        """max_position_embeddings less its first two rows, which no token's position uses (514 -> 512)."""
        return self.max_position_embeddings - 2


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
            whose tokenizer.json holds the whole pipeline and runs as it is (unless bert_tokenizer).
        bert_tokenizer: the family's tokenizer is transformers' BertTokenizer under another name, as ELECTRA's:
            BERT's pipeline is built on tokenizer.json's vocabulary, with or without a tokenizer_class.
    """

    config_class: type[BertConfig]
    module: str
    prefix: str
    heads: tuple[str, ...] = FAMILY_HEADS
    tokenizer_classes: tuple[str, ...] = ()
    bert_tokenizer: bool = False


def _tokenizers(name: str) -> tuple[str, ...]:
    """transformers' slow and fast tokenizer class names for a family's `name`."""
    return (f"{name}Tokenizer", f"{name}TokenizerFast")


# model_type -> its family. BERT's heads are more than FAMILY_HEADS: the Auto classes take each class it has.
FAMILIES: dict[str, Family] = {
    "bert": Family(BertConfig, "bertlite.models.heads", "Bert", heads=(), bert_tokenizer=True),
    "roberta": Family(RobertaConfig, "bertlite.models.roberta", "Roberta", tokenizer_classes=_tokenizers("Roberta")),
    "xlm-roberta": Family(
        XLMRobertaConfig, "bertlite.models.roberta", "XLMRoberta", tokenizer_classes=_tokenizers("XLMRoberta")
    ),
    "camembert": Family(
        CamembertConfig, "bertlite.models.roberta", "Camembert", tokenizer_classes=_tokenizers("Camembert")
    ),
    "electra": Family(
        ElectraConfig,
        "bertlite.models.electra",
        "Electra",
        heads=(*FAMILY_HEADS, "ForPreTraining"),
        tokenizer_classes=_tokenizers("Electra"),
        bert_tokenizer=True,
    ),
    "mpnet": Family(MPNetConfig, "bertlite.models.mpnet", "MPNet", tokenizer_classes=_tokenizers("MPNet")),
}
# model_type -> its config class, for AutoConfig and the jobs.
CONFIG_CLASSES: dict[str, type[BertConfig]] = {model_type: f.config_class for model_type, f in FAMILIES.items()}
