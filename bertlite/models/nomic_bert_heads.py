"""NomicBERT's task heads under transformers' names: NomicBertForMaskedLM (cls.predictions: transform, decoder),
NomicBertForSequenceClassification (dropout and classifier on the pooler output) and NomicBertForTokenClassification
(dropout and classifier on every token), each on NomicBertModel under `nomic_bert`, with transformers' keys; each on
NomicBertPreTrainedModel and ModelWithHead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config.nomic_bert import NomicBertConfig
from bertlite.layers.activations import ACT2FN
from bertlite.models.heads import bert_inputs, classifier_dropout, sequence_classification_loss, token_loss
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.nomic_bert import NomicBertModel, NomicBertPreTrainedModel
from bertlite.models.outputs import MaskedLMOutput, SequenceClassifierOutput, TokenClassifierOutput

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
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in NomicBertModel.forward.
            labels: (B, T) token ids at masked positions, -100 elsewhere.
            **kwargs: NomicBertModel.forward's other keywords and return_dict.

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
        return self.cls(sequence_output)


class NomicBertForSequenceClassification(NomicBertPreTrainedModel, ModelWithHead):
    """transformers' NomicBertForSequenceClassification: dropout and classifier on the pooler output."""

    base_model_class = NomicBertModel

    def __init__(self, config: NomicBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model (with its pooler) and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as NomicBertModel's.
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
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in NomicBertModel.forward.
            labels: as in BertForSequenceClassification.forward (problem_type inferred and stored when unset).
            **kwargs: NomicBertModel.forward's other keywords and return_dict.

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
            first_tokens: (B, H) each sequence's first-token hidden state (unread: NomicBERT's head reads the pooler).
            pooled: (B, H) the pooler output.

        Returns:
            (B, num_labels) logits.
        """
        return self.classifier(self.dropout(pooled))


class NomicBertForTokenClassification(NomicBertPreTrainedModel, ModelWithHead):
    """transformers' NomicBertForTokenClassification: dropout and classifier on every token."""

    base_model_class = NomicBertModel

    def __init__(self, config: NomicBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as NomicBertModel's.
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
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in NomicBertModel.forward.
            labels: (B, T) class ids, -100 where no loss is wanted.
            **kwargs: NomicBertModel.forward's other keywords and return_dict.

        Returns:
            TokenClassifierOutput: loss, logits (B, T, num_labels), hidden_states, attentions.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = token_loss(logits, labels)
        return self._finish(TokenClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)
