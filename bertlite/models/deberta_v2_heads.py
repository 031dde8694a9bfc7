"""DeBERTa-v2's task heads under transformers' names, each on DebertaV2Model under `deberta`:
DebertaV2ForMaskedLM (legacy: `cls.predictions` with transform and a decoder tied to the word embeddings; otherwise
`lm_predictions.lm_head`, which multiplies by the word embeddings themselves), DebertaV2ForSequenceClassification
and DebertaV2ForMultipleChoice (ContextPooler `pooler` on the first token, dropout, classifier),
DebertaV2ForTokenClassification and DebertaV2ForQuestionAnswering; each on DebertaV2PreTrainedModel and
ModelWithHead, running the shared forwards of models.heads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config.deberta_v2 import DebertaV2Config
from bertlite.layers.activations import ACT2FN
from bertlite.models.deberta_v2 import DebertaV2Model, DebertaV2PreTrainedModel
from bertlite.models.heads import (
    add_dropout_classifier,
    check_span_labels,
    masked_lm_forward,
    multiple_choice_forward,
    question_answering_forward,
    sequence_classification_forward,
    sequence_classification_loss,
    token_classification_forward,
)
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.outputs import BaseModelOutputWithPooling, SequenceClassifierOutput

__all__ = [
    "ContextPooler",
    "DebertaV2ForMaskedLM",
    "DebertaV2ForMultipleChoice",
    "DebertaV2ForQuestionAnswering",
    "DebertaV2ForSequenceClassification",
    "DebertaV2ForTokenClassification",
    "DebertaV2Model",
]


class ContextPooler(nn.Module):
    """transformers' ContextPooler: act(dense(dropout(first token))), pooler_hidden_act."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.pooler_hidden_size, config.pooler_hidden_size)
        self.dropout = nn.Dropout(config.pooler_dropout)
        self.activation = ACT2FN[config.pooler_hidden_act]

    def forward(self, first_tokens: Tensor) -> Tensor:
        """(B, H) first-token hidden states to (B, H)."""
        return self.activation(self.dense(self.dropout(first_tokens)))


class LegacyDebertaV2PredictionHeadTransform(nn.Module):
    """transformers' legacy transform: LayerNorm(act(dense(x)))."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class LegacyDebertaV2LMPredictionHead(nn.Module):
    """transformers' legacy head: transform, then decoder (tied to the word embeddings, its bias `bias`)."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.transform = LegacyDebertaV2PredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.decoder(self.transform(hidden_states))


class LegacyDebertaV2OnlyMLMHead(nn.Module):
    """transformers' LegacyDebertaV2OnlyMLMHead: `predictions`."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.predictions = LegacyDebertaV2LMPredictionHead(config)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return self.predictions(sequence_output)


class DebertaV2LMPredictionHead(nn.Module):
    """transformers' DebertaV2LMPredictionHead (legacy=False): LayerNorm(act(dense(x))) times the word embeddings,
    plus `bias`."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: Tensor, word_embeddings: nn.Embedding) -> Tensor:
        hidden_states = self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))
        return torch.matmul(hidden_states, word_embeddings.weight.t()) + self.bias


class DebertaV2OnlyMLMHead(nn.Module):
    """transformers' DebertaV2OnlyMLMHead: `lm_head`."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.lm_head = DebertaV2LMPredictionHead(config)

    def forward(self, sequence_output: Tensor, word_embeddings: nn.Embedding) -> Tensor:
        return self.lm_head(sequence_output, word_embeddings)


class DebertaV2ForMaskedLM(DebertaV2PreTrainedModel, ModelWithHead):
    """transformers' DebertaV2ForMaskedLM: `cls` (config.legacy, the default) or `lm_predictions`."""

    base_model_class = DebertaV2Model
    output_embeddings = "cls.predictions.decoder"
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "deberta.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: DebertaV2Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (legacy: which head).
            attn_implementation: as DebertaV2Model's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.legacy = self.config.legacy
        if self.legacy:
            self.cls = LegacyDebertaV2OnlyMLMHead(self.config)
        else:
            # The new head reads the word embeddings itself: nothing to tie.
            self._tied_weights_keys = {}
            self.output_embeddings = None
            self.lm_predictions = DebertaV2OnlyMLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        if self.legacy:
            return self.cls(sequence_output)
        return self.lm_predictions(sequence_output, self.deberta.embeddings.word_embeddings)


def deberta_sequence_loss(config: DebertaV2Config, logits: Tensor, labels: Tensor) -> Tensor:
    """transformers' DeBERTa sequence-classification loss: with problem_type unset, its own rules (num_labels 1:
    mean squared error; class ids: cross-entropy over the texts whose label is not negative, 0 when none is; a
    (B, num_labels) distribution: soft-label cross-entropy), else the shared loss of that problem_type.

    Args:
        config: the classifier's config (num_labels, problem_type).
        logits: (B, num_labels).
        labels: (B,) class ids or floats, or (B, num_labels) label distributions.

    Returns:
        The loss.
    """
    if config.problem_type is not None:
        return sequence_classification_loss(config, logits, labels)
    if config.num_labels == 1:
        return F.mse_loss(logits.view(-1).to(labels.dtype), labels.view(-1))
    if labels.dim() == 1 or labels.shape[-1] == 1:
        kept = (labels >= 0).nonzero()  # (K, 1): the texts with a label
        labels = labels.long()
        if kept.shape[0] == 0:
            return torch.tensor(0).to(logits)
        kept_logits = torch.gather(logits, 0, kept.expand(kept.shape[0], logits.shape[1]))
        kept_labels = torch.gather(labels, 0, kept.view(-1))
        return F.cross_entropy(kept_logits.view(-1, config.num_labels).float(), kept_labels.view(-1))
    return -((F.log_softmax(logits, dim=-1) * labels).sum(-1)).mean()


def _add_pooled_classifier(model: ModelWithHead, num_outputs: int) -> None:
    """ContextPooler `pooler`, then `dropout` (cls_dropout, else hidden_dropout_prob) and `classifier`."""
    config = model.config
    model.pooler = ContextPooler(config)
    drop = config.hidden_dropout_prob if config.cls_dropout is None else config.cls_dropout
    add_dropout_classifier(model, num_outputs, nn.Dropout(drop))


class DebertaV2ForSequenceClassification(DebertaV2PreTrainedModel, ModelWithHead):
    """transformers' DebertaV2ForSequenceClassification: ContextPooler on the first token, dropout, classifier."""

    base_model_class = DebertaV2Model

    def __init__(self, config: DebertaV2Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as DebertaV2Model's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        _add_pooled_classifier(self, self.config.num_labels)
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
        """The shared sequence_classification_forward with DeBERTa's own loss (deberta_sequence_loss).

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in DebertaV2Model.forward.
            labels: as deberta_sequence_loss takes them.
            **kwargs: the base model's other keywords and return_dict.

        Returns:
            SequenceClassifierOutput (loss, logits, hidden_states, attentions); return_dict=False: its tuple.
        """
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        output = sequence_classification_forward(self, *inputs, **{**kwargs, "return_dict": True})
        if labels is not None:  # a new output, so the loss comes first in its tuple
            loss = deberta_sequence_loss(self.config, output.logits, labels)
            output = SequenceClassifierOutput(loss, output.logits, output.hidden_states, output.attentions)
        return self._finish(output, kwargs)

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """The head alone, for a caller that ran the base model itself (bertlite's CrossEncoder).

        Args:
            first_tokens: (B, H) each sequence's first-token hidden state.
            pooled: unread (DeBERTa's base model has no pooler; the head's ContextPooler reads first_tokens).

        Returns:
            (B, num_labels) logits.
        """
        return self.classifier(self.dropout(self.pooler(first_tokens)))


class DebertaV2ForMultipleChoice(DebertaV2PreTrainedModel, ModelWithHead):
    """transformers' DebertaV2ForMultipleChoice: ContextPooler, dropout, one score per choice."""

    base_model_class = DebertaV2Model

    def __init__(self, config: DebertaV2Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as DebertaV2Model's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        _add_pooled_classifier(self, 1)
        self.post_init()

    forward = multiple_choice_forward

    def choice_scores(self, outputs: BaseModelOutputWithPooling) -> Tensor:
        """(B * num_choices, 1) scores from the base model's outputs of every choice: each one's first token."""
        return self.classifier(self.dropout(self.pooler(outputs.last_hidden_state[:, 0])))


class DebertaV2ForTokenClassification(DebertaV2PreTrainedModel, ModelWithHead):
    """transformers' DebertaV2ForTokenClassification: dropout and classifier on every token."""

    base_model_class = DebertaV2Model

    def __init__(self, config: DebertaV2Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as DebertaV2Model's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, self.config.num_labels, nn.Dropout(self.config.hidden_dropout_prob))
        self.post_init()

    forward = token_classification_forward


class DebertaV2ForQuestionAnswering(DebertaV2PreTrainedModel, ModelWithHead):
    """transformers' DebertaV2ForQuestionAnswering: qa_outputs (start, end) on every token."""

    base_model_class = DebertaV2Model

    def __init__(self, config: DebertaV2Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels must be 2: start, end).
            attn_implementation: as DebertaV2Model's.

        Raises:
            ValueError: config.num_labels is not 2.
        """
        super().__init__(config)
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    forward = question_answering_forward
