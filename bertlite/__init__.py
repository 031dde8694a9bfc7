"""bertlite: a small, exact, fast PyTorch BERT that loads Hugging Face checkpoints."""

from bertlite.config import BertConfig
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

__version__ = "0.1.0"

__all__ = [
    "BaseModelOutputWithPooling",
    "BertAttention",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "BertIntermediate",
    "BertLayer",
    "BertModel",
    "BertOutput",
    "BertPooler",
    "BertPreTrainedModel",
    "BertSelfAttention",
    "BertSelfOutput",
    "CheckpointError",
    "remap_state_dict",
    "__version__",
]
