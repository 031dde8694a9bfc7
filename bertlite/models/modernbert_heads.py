"""ModernBERT's task heads under transformers' names: ModernBertForMaskedLM (head, decoder),
ModernBertForSequenceClassification (the first token or the mean of the real tokens, then head, drop, classifier),
ModernBertForTokenClassification, ModernBertForQuestionAnswering and ModernBertForMultipleChoice, each on
ModernBertModel under `model`, as transformers' keys have them; each on ModernBertPreTrainedModel and
ModelWithHead.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config.modernbert import ModernBertConfig
from bertlite.layers.packing import PackedLayout
from bertlite.models.heads import bert_inputs, sequence_classification_loss, span_outputs, token_loss
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.modernbert import ModernBertModel, ModernBertPredictionHead, ModernBertPreTrainedModel
from bertlite.models.outputs import (
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

__all__ = [
    "ModernBertForMaskedLM",
    "ModernBertForMultipleChoice",
    "ModernBertForQuestionAnswering",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "ModernBertModel",
    "ModernBertPredictionHead",
]


def add_classifier(model: ModernBertPreTrainedModel, num_outputs: int) -> None:
    """A classifier head's modules, in transformers' order: head, drop and classifier (num_outputs wide).

    Args:
        model: the head class being built.
        num_outputs: the classifier's outputs (num_labels, or 1 for a choice's score).
    """
    model.head = ModernBertPredictionHead(model.config)
    model.drop = nn.Dropout(model.config.classifier_dropout)
    model.classifier = nn.Linear(model.config.hidden_size, num_outputs)


class ModernBertForMaskedLM(ModernBertPreTrainedModel, ModelWithHead):
    """transformers' ModernBertForMaskedLM: head, then decoder (tied to the token embeddings by default)."""

    base_model_class = ModernBertModel
    output_embeddings = "decoder"
    _tied_weights_keys = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}
    head_inits = {"decoder": "out"}

    def __init__(self, config: ModernBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights); attn_implementation:
        as ModernBertModel's."""
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.head = ModernBertPredictionHead(self.config)
        self.decoder = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=self.config.decoder_bias)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> MaskedLMOutput | tuple[Tensor, ...]:
        """Vocabulary logits for every token, and the masked-LM loss when labels are given.

        Args:
            input_ids, attention_mask, position_ids, inputs_embeds: as in ModernBertModel.forward.
            labels: (B, T) token ids at masked positions, -100 elsewhere. With config.sparse_prediction only
                the labelled rows get logits, as transformers does.
            **kwargs: ModernBertModel.forward's other keywords and return_dict.

        Returns:
            MaskedLMOutput: loss, logits, hidden_states, attentions; with return_dict=False its tuple.
        """
        outputs = self._encode(**bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds), **kwargs)
        hidden = outputs.last_hidden_state
        if self.config.sparse_prediction and labels is not None:
            labels = labels.view(-1)
            hidden = hidden.reshape(labels.shape[0], -1)
            kept = labels != self.config.sparse_pred_ignore_index
            hidden, labels = hidden[kept], labels[kept]
        logits = self._prediction_scores(hidden)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().view(-1, self.config.vocab_size), labels.view(-1))
        return self._finish(MaskedLMOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """Vocabulary logits from last hidden states (any leading shape): decoder(head(x)), as bertlite's SparseEncoder
        reads every family's masked-LM head."""
        return self.decoder(self.head(sequence_output))


class ModernBertForSequenceClassification(ModernBertPreTrainedModel, ModelWithHead):
    """transformers' ModernBertForSequenceClassification: the first token or the mean of the real tokens
    (config.classifier_pooling), then head, drop and classifier."""

    base_model_class = ModernBertModel
    head_inits = {"classifier": "final_out"}

    def __init__(self, config: ModernBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights); attn_implementation:
        as ModernBertModel's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_classifier(self, self.config.num_labels)
        self.post_init()

    @property
    def reads_first_token_only(self) -> bool:
        """Whether the head reads each sequence's first token alone ("cls" pooling), which a caller may run alone."""
        return self.config.classifier_pooling == "cls"

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Tensor, ...]:
        """Classify (or regress) each sequence.

        Args:
            input_ids, attention_mask, position_ids, inputs_embeds: as in ModernBertModel.forward.
            labels: as in BertForSequenceClassification.forward (problem_type inferred and stored when unset).
                A packed batch (lengths= or layout=) is pooled per sequence.
            **kwargs: ModernBertModel.forward's other keywords and return_dict.

        Returns:
            SequenceClassifierOutput: loss, logits (B, num_labels), hidden_states, attentions.
        """
        if kwargs.get("lengths") is not None:  # a packed batch: its layout, for the per-sequence pooling
            kwargs["layout"] = PackedLayout.from_lengths(torch.as_tensor(kwargs.pop("lengths")), self.dtype)
        outputs = self._encode(**bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds), **kwargs)
        hidden = outputs.last_hidden_state
        if kwargs.get("layout") is not None:
            logits = self.classify_packed(hidden, kwargs["layout"])
        elif self.config.classifier_pooling == "cls":
            logits = self.classify(hidden[:, 0])
        else:
            mask = attention_mask if attention_mask is not None else torch.ones(hidden.shape[:2], device=hidden.device)
            logits = self.classify((hidden * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True))
        loss = None if labels is None else sequence_classification_loss(self.config, logits, labels)
        return self._finish(SequenceClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)

    def classify(self, pooled: Tensor, unused: Tensor | None = None) -> Tensor:
        """The head alone, for a caller that ran the base model itself (bertlite's CrossEncoder).

        Args:
            pooled: (B, H) each sequence's first token ("cls" pooling) or the mean of its real tokens ("mean").
            unused: a pooler output (BERT's heads read it; ModernBERT has none).

        Returns:
            (B, num_labels) logits.
        """
        return self.classifier(self.drop(self.head(pooled)))

    def classify_packed(self, hidden: Tensor, layout: PackedLayout) -> Tensor:
        """The head on a packed batch's rows, pooled per sequence as config.classifier_pooling says.

        Args:
            hidden: (N, H) last_hidden_state of a packed batch.
            layout: its PackedLayout.

        Returns:
            (B, num_labels) logits.
        """
        return self.classify(self.pool_packed(hidden, layout))

    def pool_packed(self, hidden: Tensor, layout: PackedLayout) -> Tensor:
        """Each sequence of a packed batch pooled as config.classifier_pooling says: its first row, or its mean.

        Args:
            hidden: (N, H) last_hidden_state of a packed batch.
            layout: its PackedLayout.

        Returns:
            (B, H) pooled rows, each from its own sequence's rows only.
        """
        if self.config.classifier_pooling == "cls":
            return hidden[layout.starts]
        sums = hidden.new_zeros(layout.batch_size, hidden.shape[1]).index_add_(0, layout.sequence_index, hidden)
        return sums / layout.lengths[:, None].to(hidden.dtype)


class ModernBertForTokenClassification(ModernBertPreTrainedModel, ModelWithHead):
    """transformers' ModernBertForTokenClassification: head, drop and classifier on every token."""

    base_model_class = ModernBertModel
    head_inits = {"classifier": "final_out"}

    def __init__(self, config: ModernBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights); attn_implementation:
        as ModernBertModel's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_classifier(self, self.config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Tensor, ...]:
        """Classify every token.

        Args:
            input_ids, attention_mask, position_ids, inputs_embeds: as in ModernBertModel.forward.
            labels: (B, T) class ids, -100 where no loss is wanted.
            **kwargs: ModernBertModel.forward's other keywords and return_dict.

        Returns:
            TokenClassifierOutput: loss, logits (B, T, num_labels), hidden_states, attentions.
        """
        outputs = self._encode(**bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds), **kwargs)
        logits = self.classifier(self.drop(self.head(outputs.last_hidden_state)))  # (B, T, num_labels)
        loss = token_loss(logits, labels)
        return self._finish(TokenClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)


class ModernBertForQuestionAnswering(ModernBertPreTrainedModel, ModelWithHead):
    """transformers' ModernBertForQuestionAnswering: head, drop and classifier (start and end) on every token."""

    base_model_class = ModernBertModel
    head_inits = {"classifier": "final_out"}

    def __init__(self, config: ModernBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights); attn_implementation:
        as ModernBertModel's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_classifier(self, self.config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        **kwargs: Any,
    ) -> QuestionAnsweringModelOutput | tuple[Tensor, ...]:
        """Score every token as the start and the end of the answer span, in transformers' argument order.

        Args:
            input_ids, attention_mask, position_ids: as in ModernBertModel.forward.
            start_positions, end_positions: (B,) token indices of the answer span; the loss needs both.
                Positions outside the sequence are clamped to T and add nothing, as in transformers.
            **kwargs: ModernBertModel.forward's other keywords and return_dict.

        Returns:
            QuestionAnsweringModelOutput: loss (mean of the start and end losses), start_logits and end_logits
            (B, T), hidden_states, attentions.
        """
        outputs = self._encode(
            **bert_inputs(input_ids, attention_mask, None, position_ids, kwargs.pop("inputs_embeds", None)), **kwargs
        )
        logits = self.classifier(self.drop(self.head(outputs.last_hidden_state)))  # (B, T, 2)
        loss, start_logits, end_logits = span_outputs(logits, start_positions, end_positions)
        output = QuestionAnsweringModelOutput(loss, start_logits, end_logits, outputs.hidden_states, outputs.attentions)
        return self._finish(output, kwargs)


class ModernBertForMultipleChoice(ModernBertPreTrainedModel, ModelWithHead):
    """transformers' ModernBertForMultipleChoice: each choice pooled (its first real token, or the mean of its real
    tokens), then head, drop and classifier: one score per choice."""

    base_model_class = ModernBertModel
    head_inits = {"classifier": "final_out"}

    def __init__(self, config: ModernBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights); attn_implementation:
        as ModernBertModel's."""
        super().__init__(config)
        self._add_base_model(attn_implementation)
        add_classifier(self, 1)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        **kwargs: Any,
    ) -> MultipleChoiceModelOutput | tuple[Tensor, ...]:
        """Score each choice of each example.

        Args:
            input_ids, attention_mask, position_ids, inputs_embeds: as in ModernBertModel.forward, with a choices
                axis: (B, num_choices, T) (inputs_embeds (B, num_choices, T, H)). "mean" pooling needs the mask.
            labels: (B,) choice index.
            **kwargs: ModernBertModel.forward's other keywords and return_dict.

        Returns:
            MultipleChoiceModelOutput: loss, logits (B, num_choices), hidden_states, attentions.

        Raises:
            ValueError: neither input_ids nor inputs_embeds, not of the shape above, or "mean" pooling without
                attention_mask.
        """
        first = input_ids if input_ids is not None else inputs_embeds
        if first is None or first.dim() != (3 if input_ids is not None else 4):
            shape = None if first is None else tuple(first.shape)
            raise ValueError(f"{type(self).__name__} takes input_ids (batch, num_choices, seq_len), got {shape}")
        if self.config.classifier_pooling == "mean" and attention_mask is None:
            raise ValueError(
                "classifier_pooling='mean' needs attention_mask: the mean is over each choice's real tokens"
            )
        num_choices = first.shape[1]

        def flat(t: Tensor | None, dims: int = 1) -> Tensor | None:
            return None if t is None else t.reshape(-1, *t.shape[t.dim() - dims :])  # (B * C, T, ...)

        attention_mask = flat(attention_mask)
        outputs = self._encode(
            **bert_inputs(flat(input_ids), attention_mask, None, flat(position_ids), flat(inputs_embeds, 2)), **kwargs
        )
        hidden = outputs.last_hidden_state  # (B * C, T, H)
        if self.config.classifier_pooling == "cls":
            # The first real token: the first column of a right-padded mask, as transformers takes it.
            first_token = attention_mask.argmax(dim=-1) if attention_mask is not None else 0
            pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), first_token]
        else:
            pooled = (hidden * attention_mask.unsqueeze(-1)).sum(dim=1) / attention_mask.sum(dim=1, keepdim=True)
        logits = self.classifier(self.drop(self.head(pooled))).view(-1, num_choices)  # (B, C)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return self._finish(MultipleChoiceModelOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)
