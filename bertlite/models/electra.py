"""ELECTRA: BERT's module tree with narrower embeddings, and ELECTRA's heads.

transformers' ElectraModel is BertModel without a pooler whose embeddings are embedding_size wide; when that
differs from hidden_size, `embeddings_project` (a Linear) widens them before the first layer. Everything
else is BertModel's, packed path included: the projection runs on the embeddings' output, padded or packed
(BertModel._embed). The heads keep transformers' names under the base model prefix "electra": the sequence
classifier reads the first token through dense, GELU and out_proj (the ms-marco-electra cross-encoders),
the generator's masked-LM head is generator_predictions + generator_lm_head (tied to the word embeddings),
the discriminator's replaced-token head is discriminator_predictions, multiple choice scores each choice's
sequence_summary (the config's summary_* fields); token classification and question answering are BERT's modules.
Each head is ELECTRA's own class, on ElectraPreTrainedModel and ModelWithHead.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config import BertConfig, ElectraConfig
from bertlite.layers.activations import ACT2FN
from bertlite.models.bert import BertEmbeddings, BertModel, BertPreTrainedModel
from bertlite.models.heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    add_dropout_classifier,
    bert_inputs,
    check_span_labels,
    classifier_dropout,
    family_config,
    masked_lm_forward,
    multiple_choice_forward,
    question_answering_forward,
    sequence_classification_forward,
    token_classification_forward,
)
from bertlite.models.modeling_utils import ModelWithHead, PreTrainedModel
from bertlite.models.outputs import BaseModelOutputWithPooling, ElectraForPreTrainingOutput

# transformers' summary_type values its sequence summary computes ("attn" it leaves unimplemented).
SUMMARY_TYPES = ("first", "last", "mean", "cls_index")


class ElectraEmbeddings(BertEmbeddings):
    """transformers' ElectraEmbeddings: BERT's, embedding_size wide (ElectraModel projects them to hidden_size)."""

    def __init__(self, config: ElectraConfig) -> None:
        nn.Module.__init__(self)  # BertEmbeddings' modules at another width, in its order
        width = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.position_embedding_type = config.position_embedding_type
        self.first_position = 0


class ElectraModel(BertModel):
    """transformers' ElectraModel: BertModel with ELECTRA's embeddings, their projection, and no pooler."""

    config_class = ElectraConfig
    base_model_prefix = "electra"
    embeddings_class = ElectraEmbeddings
    _as_config = family_config(ElectraConfig)

    def __init__(
        self, config: BertConfig, add_pooling_layer: bool = False, attn_implementation: str | None = None
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config (an ElectraConfig, or transformers' ElectraConfig).
            add_pooling_layer: taken as BertModel's callers pass it; ELECTRA has no pooler, so True is refused.
            attn_implementation: as BertModel's.

        Raises:
            ValueError: add_pooling_layer=True, or an unknown attention name.
        """
        if add_pooling_layer:
            raise ValueError("ElectraModel has no pooler (transformers' ELECTRA has none): use cls or mean pooling")
        super().__init__(config, add_pooling_layer=False, attn_implementation=attn_implementation)
        config = self.config
        if config.embedding_size != config.hidden_size:
            encoder = self._modules.pop("encoder")  # re-added after the projection: transformers' key order
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
            self.encoder = encoder
            if not self.embeddings_project.weight.is_meta:
                self._init_weights(self.embeddings_project)
        else:
            self.embeddings_project = None

    def _embed(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
        inputs_embeds: Tensor | None,
    ) -> Tensor:
        embeddings = super()._embed(input_ids, token_type_ids, position_ids, inputs_embeds)
        return embeddings if self.embeddings_project is None else self.embeddings_project(embeddings)


class ElectraClassificationHead(nn.Module):
    """transformers' ElectraClassificationHead: the first token through dropout, dense, GELU, dropout, out_proj."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN["gelu"]  # GELU whatever hidden_act, as ELECTRA's authors (not BERT's tanh)
        self.dropout = classifier_dropout(config)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features: Tensor) -> Tensor:
        """(B, T, H) hidden states -> (B, num_labels) logits, from each sequence's first token."""
        x = self.dropout(features[:, 0, :])
        x = self.dropout(self.activation(self.dense(x)))
        return self.out_proj(x)


class ElectraGeneratorPredictions(nn.Module):
    """transformers' ElectraGeneratorPredictions: dense to embedding_size, GELU (whatever hidden_act), LayerNorm."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.activation = ACT2FN["gelu"]
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.LayerNorm(self.activation(self.dense(hidden_states)))


class ElectraDiscriminatorPredictions(nn.Module):
    """transformers' ElectraDiscriminatorPredictions: dense, hidden_act, one logit per token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: Tensor) -> Tensor:
        """(..., H) -> (...) logits."""
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)


class ElectraSequenceSummary(nn.Module):
    """transformers' ElectraSequenceSummary, from the config's summary_* fields: one token's state (summary_type
    first, last; cls_index without an index: the last) or the mean over the tokens, then dropout, a projection
    (summary_use_proj), the activation (summary_activation) and dropout (summary_last_dropout)."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.summary_type = config.summary_type
        if self.summary_type not in SUMMARY_TYPES:
            raise ValueError(f"summary_type={self.summary_type!r} is not implemented (supported: {SUMMARY_TYPES})")
        self.summary: nn.Module = nn.Identity()
        if config.summary_use_proj:
            # summary_proj_to_labels and summary_first_dropout are no ElectraConfig fields: config.json may carry them
            to_labels = getattr(config, "summary_proj_to_labels", False) and config.num_labels > 0
            self.summary = nn.Linear(config.hidden_size, config.num_labels if to_labels else config.hidden_size)
        name = config.summary_activation or "linear"
        if name not in ACT2FN:
            raise ValueError(f"summary_activation={name!r} is not implemented (supported: {', '.join(ACT2FN)})")
        self.activation = ACT2FN[name]
        first, last = getattr(config, "summary_first_dropout", 0.0), config.summary_last_dropout
        self.first_dropout = nn.Dropout(first) if first > 0 else nn.Identity()
        self.last_dropout = nn.Dropout(last) if last > 0 else nn.Identity()

    def forward(self, hidden_states: Tensor) -> Tensor:
        """(B, T, H) -> (B, H) (or (B, num_labels) projected to the labels)."""
        if self.summary_type == "first":
            output = hidden_states[:, 0]
        elif self.summary_type == "mean":
            output = hidden_states.mean(dim=1)
        else:  # "last", and "cls_index" without an index: the last position, padding or not, as transformers
            output = hidden_states[:, -1]
        return self.last_dropout(self.activation(self.summary(self.first_dropout(output))))


class ElectraPreTrainedModel(PreTrainedModel):
    """transformers' ElectraPreTrainedModel: what the ELECTRA heads share: the config, the base model under
    "electra", and BERT's init and module types (ElectraModel is BertModel's tree)."""

    config_class = ElectraConfig
    base_model_prefix = "electra"
    base_model_class = ElectraModel
    _as_config = family_config(ElectraConfig)
    _checkpointed_module_types = BertPreTrainedModel._checkpointed_module_types
    _attention_module_types = BertPreTrainedModel._attention_module_types
    _init_weights = BertPreTrainedModel._init_weights


class ElectraForSequenceClassification(ElectraPreTrainedModel, ModelWithHead):
    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head (no pooler: the classifier reads the first token).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertForSequenceClassification's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.classifier = ElectraClassificationHead(self.config)
        self.post_init()

    forward = sequence_classification_forward

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """BertForSequenceClassification.classify: ELECTRA's head reads the first tokens (B, H)."""
        return self.classifier(first_tokens[:, None])


class ElectraForMaskedLM(ElectraPreTrainedModel, ModelWithHead):
    output_embeddings = "generator_lm_head"
    _tied_weights_keys = {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"}

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and the generator's masked-LM head, its decoder tied to the word embeddings.

        Args:
            config: the model's config.
            attn_implementation: as BertForMaskedLM's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.generator_predictions = ElectraGeneratorPredictions(self.config)
        self.generator_lm_head = nn.Linear(self.config.embedding_size, self.config.vocab_size)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.generator_lm_head(self.generator_predictions(sequence_output))


class ElectraForPreTraining(ElectraPreTrainedModel, ModelWithHead):
    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the discriminator: the model and its replaced-token head.

        Args:
            config: the model's config.
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation, else "sdpa".
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(self.config)
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
    ) -> ElectraForPreTrainingOutput | tuple[Tensor, ...]:
        """Score each token as replaced (> 0) or original, and the discriminator's loss when labels are given.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in BertModel.forward.
            labels: (B, T), 1 where a token was replaced, 0 where it is the original; the loss counts the tokens
                attention_mask keeps (all without a mask), as in transformers.
            **kwargs: BertModel.forward's other keywords (output_attentions, output_hidden_states, ...)
                and return_dict.

        Returns:
            ElectraForPreTrainingOutput: loss, logits (B, T) (packed: (N,)), hidden_states and attentions as
            BertModel.forward's; with return_dict=False the tuple of its non-None fields.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        sequence_output = outputs.last_hidden_state
        logits = self.discriminator_predictions(sequence_output)  # (B, T)
        loss = None
        if labels is not None:
            length = sequence_output.shape[1]
            if attention_mask is not None:
                active = attention_mask.view(-1, length) == 1
                loss = F.binary_cross_entropy_with_logits(logits.view(-1, length)[active], labels[active].float())
            else:
                loss = F.binary_cross_entropy_with_logits(logits.view(-1, length), labels.float())
        output = ElectraForPreTrainingOutput(loss, logits, outputs.hidden_states, outputs.attentions)
        return self._finish(output, kwargs)


class ElectraForMultipleChoice(ElectraPreTrainedModel, ModelWithHead):
    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head: the sequence summary of each choice, then one score.

        Args:
            config: the model's config (its summary_* fields).
            attn_implementation: as BertForMultipleChoice's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.sequence_summary = ElectraSequenceSummary(self.config)
        self.classifier = nn.Linear(self.config.hidden_size, 1)
        self.post_init()

    forward = multiple_choice_forward

    def choice_scores(self, outputs: BaseModelOutputWithPooling) -> Tensor:
        """(B * num_choices, 1) scores from the base model's outputs of every choice: each choice's sequence summary."""
        return self.classifier(self.sequence_summary(outputs.last_hidden_state))


class ElectraForTokenClassification(ElectraPreTrainedModel, ModelWithHead):
    """transformers' ElectraForTokenClassification: BERT's head (dropout, classifier) on ElectraModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertForTokenClassification's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, self.config.num_labels)
        self.post_init()

    forward = token_classification_forward


class ElectraForQuestionAnswering(ElectraPreTrainedModel, ModelWithHead):
    """transformers' ElectraForQuestionAnswering: BERT's head (qa_outputs) on ElectraModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels must be 2: start, end).
            attn_implementation: as BertForQuestionAnswering's.

        Raises:
            ValueError: config.num_labels is not 2.
        """
        super().__init__(config)
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    forward = question_answering_forward


# isinstance(model, BertPreTrainedModel), isinstance(model, BertForSequenceClassification) and the like hold for
# ELECTRA's classes, as integrations.Trainer and CrossEncoder check and as when its heads inherited BERT's:
# virtual subclasses (PreTrainedModel is an ABC), so each head's MRO stays ELECTRA's own.
for bert_class, ours in (
    (BertPreTrainedModel, ElectraPreTrainedModel),
    (BertForSequenceClassification, ElectraForSequenceClassification),
    (BertForMaskedLM, ElectraForMaskedLM),
    (BertForMultipleChoice, ElectraForMultipleChoice),
    (BertForTokenClassification, ElectraForTokenClassification),
    (BertForQuestionAnswering, ElectraForQuestionAnswering),
):
    bert_class.register(ours)
del bert_class, ours
