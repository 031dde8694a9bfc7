"""GTE's task heads under transformers' names: GteForMaskedLM (lm_head: dense, gelu, norm, decoder),
GteForSequenceClassification (dropout and classifier on the pooler output) and GteForTokenClassification
(dropout and classifier on every token), each on GteModel under `gte`, with the keys GTE's checkpoints hold;
each on GtePreTrainedModel and ModelWithHead.
"""

from __future__ import annotations

from torch import Tensor, nn

from bertlite.config.gte import GteConfig
from bertlite.layers.activations import ACT2FN
from bertlite.models.encoder import DropoutTokenClassifier, PooledSequenceClassifier
from bertlite.models.gte import GteModel, GtePreTrainedModel
from bertlite.models.heads import (
    masked_lm_forward,
)
from bertlite.models.modeling_utils import ModelWithHead

__all__ = [
    "GteForMaskedLM",
    "GteForSequenceClassification",
    "GteForTokenClassification",
    "GteLMHead",
    "GteModel",
]


class GteLMHead(nn.Module):
    """transformers' GteLMHead: decoder(norm(gelu(dense(x)))), the decoder's bias its own (no bare bias)."""

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN["gelu"]  # transformers' head applies gelu whatever hidden_act says
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, features: Tensor) -> Tensor:
        return self.decoder(self.norm(self.act(self.dense(features))))


class GteForMaskedLM(GtePreTrainedModel, ModelWithHead):
    """transformers' GteForMaskedLM: GteModel and lm_head, the decoder tied to the word embeddings."""

    base_model_class = GteModel
    output_embeddings = "lm_head.decoder"
    _tied_weights_keys = {"lm_head.decoder.weight": "gte.embeddings.word_embeddings.weight"}

    def __init__(self, config: GteConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as GteModel's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.lm_head = GteLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.lm_head(sequence_output)


class GteForSequenceClassification(GtePreTrainedModel, PooledSequenceClassifier):
    """transformers' GteForSequenceClassification: dropout and classifier on the pooler output."""

    base_model_class = GteModel


class GteForTokenClassification(GtePreTrainedModel, DropoutTokenClassifier):
    """transformers' GteForTokenClassification: dropout and classifier on every token."""

    base_model_class = GteModel
