"""bertlite: a small, exact, fast PyTorch BERT that loads Hugging Face checkpoints.

Torch-backed names are imported on first use, so `import bertlite` and
`bertlite.BertConfig` stay cheap (and the CLI's --help fast).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bertlite.config import BertConfig

__version__ = "0.1.0"

_LAZY = {
    "AutoConfig": "bertlite.auto",
    "AutoModel": "bertlite.auto",
    "AutoModelForCausalLM": "bertlite.auto",
    "AutoModelForMaskedLM": "bertlite.auto",
    "AutoModelForMultipleChoice": "bertlite.auto",
    "AutoModelForNextSentencePrediction": "bertlite.auto",
    "AutoModelForPreTraining": "bertlite.auto",
    "AutoModelForQuestionAnswering": "bertlite.auto",
    "AutoModelForSequenceClassification": "bertlite.auto",
    "AutoModelForTokenClassification": "bertlite.auto",
    "AutoTokenizer": "bertlite.auto",
    "BaseModelOutputWithPooling": "bertlite.modeling",
    "BatchEncoding": "bertlite.tokenization",
    "BertAttention": "bertlite.modeling",
    "BertEmbeddings": "bertlite.modeling",
    "BertEncoder": "bertlite.modeling",
    "BertForMaskedLM": "bertlite.heads",
    "BertForMultipleChoice": "bertlite.heads",
    "BertForNextSentencePrediction": "bertlite.heads",
    "BertForPreTraining": "bertlite.heads",
    "BertForQuestionAnswering": "bertlite.heads",
    "BertForSequenceClassification": "bertlite.heads",
    "BertForTokenClassification": "bertlite.heads",
    "BertIntermediate": "bertlite.modeling",
    "BertLMHeadModel": "bertlite.heads",
    "BertLayer": "bertlite.modeling",
    "BertModel": "bertlite.modeling",
    "BertOutput": "bertlite.modeling",
    "BertPooler": "bertlite.modeling",
    "BertPreTrainedModel": "bertlite.modeling",
    "BertSelfAttention": "bertlite.modeling",
    "BertSelfOutput": "bertlite.modeling",
    "BertTokenizer": "bertlite.tokenization",
    "BertTokenizerFast": "bertlite.tokenization",
    "CheckpointError": "bertlite.loading",
    "CheckpointNotFoundError": "bertlite.hub",
    "DownloadError": "bertlite.hub",
    "Embedder": "bertlite.features",
    "NotCachedError": "bertlite.hub",
    "remap_state_dict": "bertlite.loading",
}

__all__ = ["BertConfig", "__version__", *_LAZY]

if TYPE_CHECKING:
    from bertlite.auto import (
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
    from bertlite.features import Embedder
    from bertlite.heads import (
        BertForMaskedLM,
        BertForMultipleChoice,
        BertForNextSentencePrediction,
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertLMHeadModel,
    )
    from bertlite.hub import CheckpointNotFoundError, DownloadError, NotCachedError
    from bertlite.loading import CheckpointError, remap_state_dict
    from bertlite.modeling import (
        BaseModelOutputWithPooling,
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
    from bertlite.tokenization import BatchEncoding, BertTokenizer, BertTokenizerFast


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bertlite' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
