"""bertlite: a small, exact, fast PyTorch BERT that loads Hugging Face checkpoints.

Torch-backed names are imported on first use, so `import bertlite` and
`bertlite.BertConfig` stay cheap (and the CLI's --help fast).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bertlite.config import FAMILIES, BertConfig

__version__ = "0.1.0"

_LAZY = {
    "AttentionUnavailableError": "bertlite.errors",
    "AutoConfig": "bertlite.models.auto",
    "AutoModel": "bertlite.models.auto",
    "AutoModelForCausalLM": "bertlite.models.auto",
    "AutoModelForMaskedLM": "bertlite.models.auto",
    "AutoModelForMultipleChoice": "bertlite.models.auto",
    "AutoModelForNextSentencePrediction": "bertlite.models.auto",
    "AutoModelForPreTraining": "bertlite.models.auto",
    "AutoModelForQuestionAnswering": "bertlite.models.auto",
    "AutoModelForSequenceClassification": "bertlite.models.auto",
    "AutoModelForTokenClassification": "bertlite.models.auto",
    "AutoTokenizer": "bertlite.models.auto",
    "BaseModelOutputWithPooling": "bertlite.models.outputs",
    "BatchEncoding": "bertlite.tokenization",
    "BertAttention": "bertlite.models.bert",
    "BertEmbeddings": "bertlite.models.bert",
    "BertEncoder": "bertlite.models.bert",
    "BertForMaskedLM": "bertlite.models.heads",
    "BertForMultipleChoice": "bertlite.models.heads",
    "BertForNextSentencePrediction": "bertlite.models.heads",
    "BertForPreTraining": "bertlite.models.heads",
    "BertForQuestionAnswering": "bertlite.models.heads",
    "BertForSequenceClassification": "bertlite.models.heads",
    "BertForTokenClassification": "bertlite.models.heads",
    "BertIntermediate": "bertlite.models.bert",
    "BertLMHeadModel": "bertlite.models.heads",
    "BertLayer": "bertlite.models.bert",
    "BertModel": "bertlite.models.bert",
    "BertOutput": "bertlite.models.bert",
    "BertPooler": "bertlite.models.bert",
    "BertPreTrainedModel": "bertlite.models.bert",
    "BertSelfAttention": "bertlite.models.bert",
    "BertSelfOutput": "bertlite.models.bert",
    "BertTokenizer": "bertlite.tokenization",
    "BertTokenizerFast": "bertlite.tokenization",
    "CheckpointError": "bertlite.errors",
    "CheckpointNotFoundError": "bertlite.errors",
    "CrossEncoder": "bertlite.jobs.cross_encoder",
    "DownloadError": "bertlite.errors",
    "Embedder": "bertlite.jobs.embedder",
    "InputError": "bertlite.errors",
    "M3Encoder": "bertlite.jobs.m3",
    "MultiVectorEncoder": "bertlite.jobs.multi_vector",
    "Int8PrecisionWarning": "bertlite.errors",
    "NotCachedError": "bertlite.errors",
    "PackedLayout": "bertlite.layers.packing",
    "SlowDtypeWarning": "bertlite.errors",
    "SentenceTransformer": "bertlite.jobs.sentence_transformer",
    "SimilarityFunction": "bertlite.util",
    "SparseEncoder": "bertlite.jobs.sparse_encoder",
    "quantize_int8": "bertlite.quant.int8",
    "remap_state_dict": "bertlite.checkpoint.remap",
}

# Each family's classes under transformers' names (RobertaModel, XLMRobertaForMaskedLM, ...) and its config.
_LAZY |= {f"{f.prefix}{head}": f.module for f in FAMILIES.values() if f.prefix != "Bert" for head in f.heads}
_LAZY |= {f.config_class.__name__: "bertlite.config" for f in FAMILIES.values() if f.prefix != "Bert"}

__all__ = ["BertConfig", "__version__", *_LAZY]

if TYPE_CHECKING:
    from bertlite.checkpoint.remap import remap_state_dict
    from bertlite.errors import (
        AttentionUnavailableError,
        CheckpointError,
        CheckpointNotFoundError,
        DownloadError,
        InputError,
        Int8PrecisionWarning,
        NotCachedError,
        SlowDtypeWarning,
    )
    from bertlite.jobs.cross_encoder import CrossEncoder
    from bertlite.jobs.embedder import Embedder
    from bertlite.jobs.m3 import M3Encoder
    from bertlite.jobs.multi_vector import MultiVectorEncoder
    from bertlite.jobs.sentence_transformer import SentenceTransformer
    from bertlite.jobs.sparse_encoder import SparseEncoder
    from bertlite.layers.packing import PackedLayout
    from bertlite.models.auto import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForMultipleChoice,
        AutoModelForNextSentencePrediction,
        AutoModelForPreTraining,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )
    from bertlite.models.bert import (
        BertAttention,
        BertEmbeddings,
        BertEncoder,
        BertIntermediate,
        BertLayer,
        BertModel,
        BertOutput,
        BertPooler,
        BertPreTrainedModel,
        BertSelfAttention,
        BertSelfOutput,
    )
    from bertlite.models.heads import (
        BertForMaskedLM,
        BertForMultipleChoice,
        BertForNextSentencePrediction,
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertLMHeadModel,
    )
    from bertlite.models.outputs import BaseModelOutputWithPooling
    from bertlite.quant.int8 import quantize_int8
    from bertlite.tokenization import BatchEncoding, BertTokenizer, BertTokenizerFast
    from bertlite.util import SimilarityFunction


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bertlite' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
