"""EuroBERT's task heads under transformers' names: EuroBertForMaskedLM (lm_head), EuroBertForSequenceClassification
(dense, GELU and classifier on the first token, the mean of the real tokens, or every token with the logits
averaged: classifier_pooling "bos", "mean", "late") and EuroBertForTokenClassification (classifier on every token),
each on EuroBertModel under `model`, as transformers' keys have them; each on EuroBertPreTrainedModel and
ModelWithHead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config.eurobert import EuroBertConfig
from bertlite.layers.packing import PackedLayout
from bertlite.models.eurobert import EuroBertModel, EuroBertPreTrainedModel
from bertlite.models.heads import bert_inputs, sequence_classification_loss, token_loss
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.outputs import MaskedLMOutput, SequenceClassifierOutput, TokenClassifierOutput

__all__ = [
    "EuroBertForMaskedLM",
    "EuroBertForSequenceClassification",
    "EuroBertForTokenClassification",
    "EuroBertModel",
]


class EuroBertForMaskedLM(EuroBertPreTrainedModel, ModelWithHead):
    """transformers' EuroBertForMaskedLM: EuroBertModel and lm_head (tied to the token embeddings when
    tie_word_embeddings)."""

    base_model_class = EuroBertModel
    output_embeddings = "lm_head"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: EuroBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as EuroBertModel's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=self.config.mlp_bias)
        self.post_init()

    # Not masked_lm_forward: transformers' EuroBERT takes the loss on float32 logits, BERT's on the logits' dtype.
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
            input_ids, attention_mask, position_ids, inputs_embeds: as in EuroBertModel.forward.
            labels: (B, T) token ids at masked positions, -100 elsewhere.
            **kwargs: EuroBertModel.forward's other keywords and return_dict.

        Returns:
            MaskedLMOutput: loss, logits, hidden_states, attentions; with return_dict=False its tuple.
        """
        outputs = self._encode(**bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds), **kwargs)
        logits = self._prediction_scores(outputs.last_hidden_state)
        loss = token_loss(logits.float(), labels)
        return self._finish(MaskedLMOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.lm_head(sequence_output)


class EuroBertForSequenceClassification(EuroBertPreTrainedModel, ModelWithHead):
    """transformers' EuroBertForSequenceClassification: dense, GELU and classifier, on each sequence's first token
    ("bos"), the mean of its real tokens ("mean"), or on every token, the logits then averaged over the real
    tokens ("late"; config.classifier_pooling)."""

    base_model_class = EuroBertModel

    def __init__(self, config: EuroBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes; classifier_pooling).
            attn_implementation: as EuroBertModel's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.dense = nn.Linear(self.config.hidden_size, self.config.hidden_size)
        self.activation = nn.GELU()
        self.classifier = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    @property
    def reads_first_token_only(self) -> bool:
        """Whether the head reads each sequence's first token alone ("bos" pooling), which a caller may run alone."""
        return self.config.classifier_pooling == "bos"

    # Not sequence_classification_forward: it pools by classifier_pooling (bos, mean, late), not by a pooler.
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
            input_ids, attention_mask, position_ids, inputs_embeds: as in EuroBertModel.forward. A packed batch
                (lengths= or layout=) is pooled per sequence.
            labels: as in BertForSequenceClassification.forward (problem_type inferred and stored when unset).
            **kwargs: EuroBertModel.forward's other keywords and return_dict.

        Returns:
            SequenceClassifierOutput: loss, logits (B, num_labels), hidden_states, attentions.
        """
        if kwargs.get("lengths") is not None:  # a packed batch: its layout, for the per-sequence pooling
            kwargs["layout"] = PackedLayout.from_lengths(torch.as_tensor(kwargs.pop("lengths")), self.dtype)
        outputs = self._encode(**bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds), **kwargs)
        hidden = outputs.last_hidden_state
        if kwargs.get("layout") is not None:
            logits = self.classify(self.pool_packed(hidden, kwargs["layout"]))
        else:
            logits = self.classify(self._pool(hidden, attention_mask))
        loss = None if labels is None else sequence_classification_loss(self.config, logits, labels)
        return self._finish(SequenceClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)

    def _head(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.activation(self.dense(hidden)))

    def _pool(self, hidden: Tensor, mask: Tensor | None) -> Tensor:
        """(B, T, H) padded rows to what classify takes: the first token, the mean over the real tokens (every
        token without a mask), or "late"'s mean of those tokens' logits, as transformers computes them."""
        if self.config.classifier_pooling == "bos":
            return hidden[:, 0]
        rows = self._head(hidden) if self.config.classifier_pooling == "late" else hidden
        if mask is None:
            return rows.mean(dim=1)
        weights = mask.to(rows.device).unsqueeze(-1)  # (B, T, 1)
        return (rows * weights).sum(dim=1) / weights.sum(dim=1)

    def pool_packed(self, hidden: Tensor, layout: PackedLayout) -> Tensor:
        """Each sequence of a packed batch pooled as config.classifier_pooling says, for classify.

        Args:
            hidden: (N, H) last_hidden_state of a packed batch.
            layout: its PackedLayout.

        Returns:
            (B, H) first rows or means; with "late", (B, num_labels): each sequence's mean of its rows' logits.
        """
        if self.config.classifier_pooling == "bos":
            return hidden[layout.starts]
        rows = self._head(hidden) if self.config.classifier_pooling == "late" else hidden
        sums = rows.new_zeros(layout.batch_size, rows.shape[1]).index_add_(0, layout.sequence_index, rows)
        return sums / layout.lengths[:, None].to(rows.dtype)

    def classify(self, pooled: Tensor, unused: Tensor | None = None) -> Tensor:
        """The head on pooled rows, for a caller that ran the base model and pooled itself (bertlite's CrossEncoder).

        Args:
            pooled: _pool's or pool_packed's rows; with "late" already the logits, returned as they are.
            unused: a pooler output (BERT's heads read it; EuroBERT has none).

        Returns:
            (B, num_labels) logits.
        """
        return pooled if self.config.classifier_pooling == "late" else self._head(pooled)


class EuroBertForTokenClassification(EuroBertPreTrainedModel, ModelWithHead):
    """transformers' EuroBertForTokenClassification: classifier on every token."""

    base_model_class = EuroBertModel

    def __init__(self, config: EuroBertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as EuroBertModel's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.classifier = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    # Not token_classification_forward: transformers' EuroBERT has no dropout before its classifier.
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
            input_ids, attention_mask, position_ids, inputs_embeds: as in EuroBertModel.forward.
            labels: (B, T) class ids, -100 where no loss is wanted.
            **kwargs: EuroBertModel.forward's other keywords and return_dict.

        Returns:
            TokenClassifierOutput: loss, logits (B, T, num_labels), hidden_states, attentions.
        """
        outputs = self._encode(**bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds), **kwargs)
        logits = self.classifier(outputs.last_hidden_state)
        loss = token_loss(logits, labels)
        return self._finish(TokenClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)
