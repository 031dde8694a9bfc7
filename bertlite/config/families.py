"""BERT's family: each member's config class (a BertConfig with its family's defaults) and its entry in
FAMILIES, the one table that says, by config.json's model_type, where a family's config, model classes and
tokenizer are. AutoConfig, the Auto models, AutoTokenizer and the jobs all read it; a new family adds its
config class here, its model module under bertlite/models/, and one Family row.
"""

from __future__ import annotations

import re
from dataclasses import InitVar, dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig
from bertlite.config.deberta_v2 import DebertaV2Config
from bertlite.config.eurobert import EuroBertConfig
from bertlite.config.gte import GteConfig
from bertlite.config.jina_bert import JinaBertConfig
from bertlite.config.jina_bert import is_original_layout as is_jina_bert_layout
from bertlite.config.jina_embeddings_v3 import JinaEmbeddingsV3Config
from bertlite.config.jina_embeddings_v3 import is_original_layout as is_jina_v3_layout
from bertlite.config.modernbert import ModernBertConfig
from bertlite.config.nomic_bert import NomicBertConfig


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


# DistilBERT's field names -> the BertConfig fields that hold them (transformers' attribute_map, completed), so the
# shared core reads BERT's names on a DistilBERT config.
DISTILBERT_NAMES = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "hidden_dim": "intermediate_size",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "activation": "hidden_act",
}
# BertConfig's fields DistilBERT has no form of (no token types, LayerNorm eps fixed at 1e-12, an encoder with
# absolute or sinusoidal positions): config.json keeps them as keys it carries, the model never reads them.
NOT_DISTILBERT_FIELDS = (
    "type_vocab_size",
    "layer_norm_eps",
    "position_embedding_type",
    "use_cache",
    "classifier_dropout",
    "is_decoder",
    "add_cross_attention",
)


@dataclass
class DistilBertConfig(BertConfig):
    """DistilBERT's config (transformers' DistilBertConfig): its names (dim, n_layers, n_heads, hidden_dim, dropout,
    attention_dropout, activation) are constructor arguments and attributes, held in BERT's fields (hidden_size,
    ...; DISTILBERT_NAMES), which the shared core reads; config.json is written with DistilBERT's keys. Its own
    fields: sinusoidal_pos_embds (fixed sinusoidal position vectors), qa_dropout and seq_classif_dropout (the
    question-answering and sequence-classification heads' dropout)."""

    model_types: ClassVar[tuple[str, ...]] = ("distilbert",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_DISTILBERT_FIELDS
    # transformers' attribute_map, completed: BERT's name -> DistilBERT's (parity and load errors name them so).
    attribute_map: ClassVar[dict[str, str]] = {field_name: name for name, field_name in DISTILBERT_NAMES.items()}
    num_hidden_layers: int = 6
    model_type: str = "distilbert"
    sinusoidal_pos_embds: bool = False
    qa_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    # DistilBERT's names as constructor arguments (None: BERT's field keeps its default); attributes after.
    dim: InitVar[int | None] = None
    n_layers: InitVar[int | None] = None
    n_heads: InitVar[int | None] = None
    hidden_dim: InitVar[int | None] = None
    dropout: InitVar[float | None] = None
    attention_dropout: InitVar[float | None] = None
    activation: InitVar[str | None] = None

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None, *names: Any) -> None:
        for name, value in zip(DISTILBERT_NAMES, names, strict=True):
            if value is not None:
                setattr(self, DISTILBERT_NAMES[name], value)
        try:
            super().__post_init__(num_labels, attn_implementation)
            if not isinstance(self.sinusoidal_pos_embds, bool):
                raise ValueError(f"sinusoidal_pos_embds must be true or false, got {self.sinusoidal_pos_embds!r}")
            for name in ("qa_dropout", "seq_classif_dropout"):
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        except ValueError as e:
            raise ValueError(_distilbert_names(str(e))) from None

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """BertConfig.from_dict on DistilBERT's keys: each held in its BERT field; BERT's keys DistilBERT lacks
        (NOT_DISTILBERT_FIELDS) kept as keys config.json carries, which the model does not read."""
        data = _bert_names({**config_dict, **kwargs})
        extra = {key: data.pop(key) for key in NOT_DISTILBERT_FIELDS if key in data}
        config = super().from_dict(data)
        config.extra.update(extra)
        return config

    def update_from_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """BertConfig.update_from_kwargs, DistilBERT's names (dim=, dropout=, ...) taken as their fields."""
        return super().update_from_kwargs(_bert_names(kwargs))

    def to_dict(self) -> dict[str, Any]:
        """config.json's keys: DistilBERT's names for BERT's fields, without the fields DistilBERT lacks."""
        out = super().to_dict()
        for name, field_name in DISTILBERT_NAMES.items():
            out[name] = out.pop(field_name)
        return dict(sorted(out.items()))


def _bert_names(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with DistilBERT's names as BERT's fields (DISTILBERT_NAMES); a BERT name given too is overridden."""
    out = dict(values)
    for name, field_name in DISTILBERT_NAMES.items():
        if name in out:
            out[field_name] = out.pop(name)
    return out


def _distilbert_names(message: str) -> str:
    """A config error naming DistilBERT's fields (dim, not hidden_size)."""
    for name, field_name in DISTILBERT_NAMES.items():
        message = re.sub(rf"\b{field_name}\b", name, message)
    return message


def _alias(field_name: str) -> property:
    """DistilBERT's name for a BERT field, read and written through it (transformers' attribute_map)."""
    return property(lambda self: getattr(self, field_name), lambda self, value: setattr(self, field_name, value))


for _name, _field_name in DISTILBERT_NAMES.items():
    setattr(DistilBertConfig, _name, _alias(_field_name))


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
        token_types: the model takes token_type_ids; False (DistilBERT): its tokenizer returns none.
    """

    config_class: type[BertConfig]
    module: str
    prefix: str
    heads: tuple[str, ...] = FAMILY_HEADS
    tokenizer_classes: tuple[str, ...] = ()
    bert_tokenizer: bool = False
    token_types: bool = True


def _tokenizers(name: str) -> tuple[str, ...]:
    """transformers' slow and fast tokenizer class names for a family's `name`."""
    return (f"{name}Tokenizer", f"{name}TokenizerFast")


# An original remote-code layout's model_type -> the family that reads it, with no code run (its config class maps
# the fields): GTE's "new" (Alibaba-NLP/new-impl).
MODEL_TYPE_ALIASES = {"new": "gte"}


def family_model_type(config_dict: dict[str, Any]) -> str | None:
    """The family that reads a config.json: its model_type after MODEL_TYPE_ALIASES, "jina_bert" for JinaBERT-v2's
    original layout, which is typed "bert" (bertlite.config.jina_bert.is_original_layout), or "jina_embeddings_v3"
    for jina-embeddings-v3's, typed "xlm-roberta" with an auto_map to its own code.

    Args:
        config_dict: config.json's keys and values.

    Returns:
        A model_type (maybe one bertlite lacks), or None when config.json has none.
    """
    if is_jina_bert_layout(config_dict):
        return "jina_bert"
    if is_jina_v3_layout(config_dict):
        return JinaEmbeddingsV3Config.model_type
    model_type = config_dict.get("model_type")
    return MODEL_TYPE_ALIASES.get(model_type, model_type)


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
        heads=(*FAMILY_HEADS, "ForPreTraining", "ForMultipleChoice"),
        tokenizer_classes=_tokenizers("Electra"),
        bert_tokenizer=True,
    ),
    "mpnet": Family(
        MPNetConfig,
        "bertlite.models.mpnet",
        "MPNet",
        heads=(*FAMILY_HEADS, "ForMultipleChoice"),
        tokenizer_classes=_tokenizers("MPNet"),
    ),
    # DistilBERT's tokenizer is BERT's WordPiece under another name; its model takes no token_type_ids.
    "distilbert": Family(
        DistilBertConfig,
        "bertlite.models.distilbert",
        "DistilBert",
        heads=(*FAMILY_HEADS, "ForMultipleChoice"),
        tokenizer_classes=_tokenizers("DistilBert"),
        bert_tokenizer=True,
        token_types=False,
    ),
    # ModernBERT's tokenizer is a plain fast tokenizer (BPE, its template in tokenizer.json; transformers v5 names it
    # TokenizersBackend, the hub's folders PreTrainedTokenizerFast); its model takes no token_type_ids.
    "modernbert": Family(
        ModernBertConfig,
        "bertlite.models.modernbert_heads",
        "ModernBert",
        heads=(*FAMILY_HEADS, "ForMultipleChoice"),
        token_types=False,
    ),
    # GTE's tokenizer is XLM-RoBERTa's (gte-multilingual) or BERT's (gte-*-en-v1.5), named in tokenizer_config.json.
    "gte": Family(
        GteConfig,
        "bertlite.models.gte_heads",
        "Gte",
        heads=("Model", "ForSequenceClassification", "ForMaskedLM", "ForTokenClassification"),
    ),
    # jina-embeddings-v3's tokenizer is XLM-RoBERTa's; its task adapters are in the base model.
    "jina_embeddings_v3": Family(
        JinaEmbeddingsV3Config,
        "bertlite.models.jina_embeddings_v3_heads",
        "JinaEmbeddingsV3",
        tokenizer_classes=_tokenizers("XLMRoberta"),
    ),
    # EuroBERT's tokenizer is a plain fast tokenizer (Llama-3's BPE); its model takes no token_type_ids.
    "eurobert": Family(
        EuroBertConfig,
        "bertlite.models.eurobert_heads",
        "EuroBert",
        heads=("Model", "ForSequenceClassification", "ForMaskedLM", "ForTokenClassification"),
        token_types=False,
    ),
    # NomicBERT's tokenizer is BERT's WordPiece (transformers maps nomic_bert to BertTokenizer).
    "nomic_bert": Family(
        NomicBertConfig,
        "bertlite.models.nomic_bert_heads",
        "NomicBert",
        heads=("Model", "ForSequenceClassification", "ForMaskedLM", "ForTokenClassification"),
        bert_tokenizer=True,
    ),
    # DeBERTa-v2/v3's tokenizer is a SentencePiece Unigram, run from its tokenizer.json; DeBERTa-v3 has no token type
    # embeddings (type_vocab_size 0) and its model ignores the token_type_ids its tokenizer returns.
    "deberta-v2": Family(
        DebertaV2Config,
        "bertlite.models.deberta_v2_heads",
        "DebertaV2",
        heads=(*FAMILY_HEADS, "ForMultipleChoice"),
        tokenizer_classes=_tokenizers("DebertaV2"),
    ),
    # JinaBERT-v2's tokenizer is BERT's WordPiece; its original layout is typed "bert" (family_model_type).
    "jina_bert": Family(
        JinaBertConfig,
        "bertlite.models.jina_bert_heads",
        "JinaBert",
        heads=("Model", "ForSequenceClassification", "ForMaskedLM", "ForTokenClassification"),
        bert_tokenizer=True,
    ),
}
# model_type -> its config class, for AutoConfig and the jobs.
CONFIG_CLASSES: dict[str, type[BertConfig]] = {model_type: f.config_class for model_type, f in FAMILIES.items()}
