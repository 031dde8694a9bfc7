"""GTE's task heads under transformers' names: GteForMaskedLM (lm_head: dense, gelu, norm, decoder),
GteForSequenceClassification (dropout and classifier on the pooler output) and GteForTokenClassification
(dropout and classifier on every token), each on GteModel under `gte`, with the keys GTE's checkpoints hold;
each on GtePreTrainedModel and ModelWithHead.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from bertlite.config.gte import GteConfig
from bertlite.layers.activations import ACT2FN
from bertlite.models.gte import GteModel, GtePreTrainedModel
from bertlite.models.heads import bert_inputs, classifier_dropout, sequence_classification_loss, token_loss
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.outputs import MaskedLMOutput, SequenceClassifierOutput, TokenClassifierOutput

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

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> MaskedLMOutput | tuple[Tensor, ...]:
        """Vocabulary logits for every token, and the masked-LM loss when labels are given.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in GteModel.forward.
            labels: (B, T) token ids at masked positions, -100 elsewhere.
            **kwargs: GteModel.forward's other keywords and return_dict.

        Returns:
            MaskedLMOutput: loss, logits, hidden_states, attentions; with return_dict=False its tuple.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        logits = self._prediction_scores(outputs.last_hidden_state)
        loss = token_loss(logits, labels)
        return self._finish(MaskedLMOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.lm_head(sequence_output)


class GteForSequenceClassification(GtePreTrainedModel, ModelWithHead):
    """transformers' GteForSequenceClassification: dropout and classifier on the pooler output."""

    base_model_class = GteModel

    def __init__(self, config: GteConfig, attn_implementation: str | None = None) -> None:
        """Build the model (with its pooler) and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as GteModel's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        self.dropout = classifier_dropout(self.config)
        self.classifier = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Tensor, ...]:
        """Classify (or regress) each sequence from the pooler output.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in GteModel.forward.
            labels: as in BertForSequenceClassification.forward (problem_type inferred and stored when unset).
            **kwargs: GteModel.forward's other keywords and return_dict.

        Returns:
            SequenceClassifierOutput: loss, logits (B, num_labels), hidden_states, attentions.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        logits = self.classify(None, outputs.pooler_output)
        loss = None if labels is None else sequence_classification_loss(self.config, logits, labels)
        return self._finish(SequenceClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """The head alone, for a caller that ran the base model itself (bertlite's CrossEncoder).

        Args:
            first_tokens: (B, H) each sequence's first-token hidden state (unread: GTE's head reads the pooler).
            pooled: (B, H) the pooler output.

        Returns:
            (B, num_labels) logits.
        """
        return self.classifier(self.dropout(pooled))


class GteForTokenClassification(GtePreTrainedModel, ModelWithHead):
    """transformers' GteForTokenClassification: dropout and classifier on every token."""

    base_model_class = GteModel

    def __init__(self, config: GteConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as GteModel's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.dropout = classifier_dropout(self.config)
        self.classifier = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Tensor, ...]:
        """Classify every token.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in GteModel.forward.
            labels: (B, T) class ids, -100 where no loss is wanted.
            **kwargs: GteModel.forward's other keywords and return_dict.

        Returns:
            TokenClassifierOutput: loss, logits (B, T, num_labels), hidden_states, attentions.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = token_loss(logits, labels)
        return self._finish(TokenClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)
