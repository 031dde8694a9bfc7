"""NomicBERT's task heads under transformers' names: NomicBertForMaskedLM (cls.predictions: transform, decoder),
NomicBertForSequenceClassification (dropout and classifier on the pooler output) and NomicBertForTokenClassification
(dropout and classifier on every token), each on NomicBertModel under `nomic_bert`, with transformers' keys; each on
NomicBertPreTrainedModel and ModelWithHead.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertlite.config.nomic_bert import NomicBertConfig
from bertlite.layers.activations import ACT2FN
from bertlite.models.encoder import DropoutTokenClassifier, PooledSequenceClassifier
from bertlite.models.heads import (
    masked_lm_forward,
)
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.nomic_bert import NomicBertModel, NomicBertPreTrainedModel

__all__ = [
    "NomicBertForMaskedLM",
    "NomicBertForSequenceClassification",
    "NomicBertForTokenClassification",
    "NomicBertOnlyMLMHead",
    "NomicBertModel",
]


class NomicBertPredictionHeadTransform(nn.Module):
    """transformers' NomicBertPredictionHeadTransform: layer_norm(act(dense(x)))."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.layer_norm(self.transform_act_fn(self.dense(hidden_states)))


class NomicBertLMPredictionHead(nn.Module):
    """transformers' NomicBertLMPredictionHead: transform, then decoder (its bias `bias` when tied)."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.transform = NomicBertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.decoder(self.transform(hidden_states))


class NomicBertOnlyMLMHead(nn.Module):
    """transformers' NomicBertOnlyMLMHead: `predictions`."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.predictions = NomicBertLMPredictionHead(config)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return self.predictions(sequence_output)


class NomicBertForMaskedLM(NomicBertPreTrainedModel, ModelWithHead):
    """transformers' NomicBertForMaskedLM: NomicBertModel and cls, the decoder tied to the word embeddings."""

    base_model_class = NomicBertModel
    output_embeddings = "cls.predictions.decoder"
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "nomic_bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: NomicBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as NomicBertModel's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.cls = NomicBertOnlyMLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.cls(sequence_output)


class NomicBertForSequenceClassification(NomicBertPreTrainedModel, PooledSequenceClassifier):
    """transformers' NomicBertForSequenceClassification: dropout and classifier on the pooler output."""

    base_model_class = NomicBertModel


class NomicBertForTokenClassification(NomicBertPreTrainedModel, DropoutTokenClassifier):
    """transformers' NomicBertForTokenClassification: dropout and classifier on every token."""

    base_model_class = NomicBertModel
