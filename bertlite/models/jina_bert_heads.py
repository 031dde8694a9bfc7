"""JinaBERT-v2's task heads: the original's JinaBertForMaskedLM (cls.predictions), JinaBertForSequenceClassification
(dropout and classifier on the pooler output, as jina-reranker-v1's) and JinaBertForTokenClassification, each BERT's
head on JinaBertModel under `bert`, with the keys the original checkpoints hold.
"""

from __future__ import annotations

from bertlite.config.jina_bert import JinaBertConfig
from bertlite.models.heads import (
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    family_config,
)
from bertlite.models.jina_bert import JinaBertModel

__all__ = [
    "JinaBertForMaskedLM",
    "JinaBertForSequenceClassification",
    "JinaBertForTokenClassification",
    "JinaBertModel",
]


class JinaBertForMaskedLM(BertForMaskedLM):
    """The original's JinaBertForMaskedLM: BERT's masked-LM head on JinaBertModel."""

    config_class = JinaBertConfig
    base_model_class = JinaBertModel
    _as_config = family_config(JinaBertConfig)


class JinaBertForSequenceClassification(BertForSequenceClassification):
    """The original's JinaBertForSequenceClassification: BERT's pooled classifier on JinaBertModel."""

    config_class = JinaBertConfig
    base_model_class = JinaBertModel
    _as_config = family_config(JinaBertConfig)


class JinaBertForTokenClassification(BertForTokenClassification):
    """The original's JinaBertForTokenClassification: BERT's token classifier on JinaBertModel."""

    config_class = JinaBertConfig
    base_model_class = JinaBertModel
    _as_config = family_config(JinaBertConfig)
