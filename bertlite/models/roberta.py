"""RoBERTa, XLM-RoBERTa and CamemBERT: BERT's module tree with RoBERTa's positions.

The three share transformers' RobertaModel architecture: the same embeddings, layers and pooler as BERT
(the same state_dict keys under the base model prefix "roberta"), and positions counted from
pad_token_id + 1, padding keeping pad_token_id's row. That one difference is RobertaEmbeddings; the rest is
BertModel's, packed path included (a packed batch's positions start at `first_position`). The heads are
RoBERTa's own, on RobertaPreTrainedModel and ModelWithHead: BERT's modules where transformers' are the same (token
classification, question answering), and their own where they differ: the sequence classifier reads the first
token through a dense + tanh layer (no pooler), the masked-LM head is `lm_head` (dense, GELU, layer_norm,
decoder). XLM-RoBERTa's and CamemBERT's heads are RoBERTa's modules and bodies on their own PreTrainedModel,
config and base model, as transformers copies them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config import BertConfig, CamembertConfig, RobertaConfig, XLMRobertaConfig
from bertlite.models.bert import BertEmbeddings, BertModel, BertPreTrainedModel
from bertlite.models.heads import (
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    add_dropout_classifier,
    check_span_labels,
    classifier_dropout,
    family_config,
    masked_lm_forward,
    question_answering_forward,
    sequence_classification_forward,
    token_classification_forward,
)
from bertlite.models.inputs import packed_position_ids
from bertlite.models.modeling_utils import ModelWithHead, PreTrainedModel


class RobertaEmbeddings(BertEmbeddings):
    """BERT's embeddings with positions counted from padding_idx + 1, as transformers' RobertaEmbeddings."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        del self.position_embeddings  # re-added last: transformers' module order, so state_dict() lists keys as its
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=self.padding_idx
        )
        self.first_position = self.padding_idx + 1

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """BertEmbeddings' forward; positions from the ids when not given: padding_idx + 1 onwards for real
        tokens, padding_idx for padding (from inputs_embeds: every position counts)."""
        if position_ids is None:
            if input_ids is not None:
                real = input_ids.ne(self.padding_idx).int()
                position_ids = (torch.cumsum(real, dim=1).type_as(real) * real).long() + self.padding_idx
            else:
                length = inputs_embeds.shape[1]
                position_ids = torch.arange(
                    self.first_position, length + self.first_position, device=inputs_embeds.device
                )
                position_ids = position_ids.unsqueeze(0)  # (1, T)
        elif input_ids is not None and input_ids.dim() == 1:
            position_ids = packed_position_ids(input_ids, position_ids, self.padding_idx)
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds)


class RobertaModel(BertModel):
    """transformers' RobertaModel: BertModel with RoBERTa's embeddings and config."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    embeddings_class = RobertaEmbeddings
    _as_config = family_config(RobertaConfig)


class RobertaClassificationHead(nn.Module):
    """transformers' RobertaClassificationHead: the first token through dropout, dense, tanh, dropout, out_proj."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = classifier_dropout(config)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features: Tensor) -> Tensor:
        """(B, T, H) hidden states -> (B, num_labels) logits, from each sequence's first token."""
        x = self.dropout(features[:, 0, :])
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)


class RobertaLMHead(nn.Module):
    """transformers' RobertaLMHead: dense, GELU (always, whatever hidden_act), layer_norm, decoder (+ bias)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, features: Tensor) -> Tensor:
        return self.decoder(self.layer_norm(F.gelu(self.dense(features))))


class RobertaPreTrainedModel(PreTrainedModel):
    """transformers' RobertaPreTrainedModel: what the RoBERTa heads share: the config, the base model under
    "roberta", and BERT's init and module types (RobertaModel is BertModel's tree)."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    base_model_class = RobertaModel
    _as_config = family_config(RobertaConfig)
    _checkpointed_module_types = BertPreTrainedModel._checkpointed_module_types
    _attention_module_types = BertPreTrainedModel._attention_module_types
    _init_weights = BertPreTrainedModel._init_weights


class RobertaForSequenceClassification(RobertaPreTrainedModel, ModelWithHead):
    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head (no pooler: the classifier reads the first token).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertForSequenceClassification's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.classifier = RobertaClassificationHead(self.config)
        self.post_init()

    forward = sequence_classification_forward

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """BertForSequenceClassification.classify: RoBERTa's head reads the first tokens (B, H)."""
        return self.classifier(first_tokens[:, None])


class RobertaForMaskedLM(RobertaPreTrainedModel, ModelWithHead):
    output_embeddings = "lm_head.decoder"
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its masked-LM head, the decoder tied to the word embeddings.

        Args:
            config: the model's config.
            attn_implementation: as BertForMaskedLM's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.lm_head = RobertaLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.lm_head(sequence_output)


class RobertaForTokenClassification(RobertaPreTrainedModel, ModelWithHead):
    """transformers' RobertaForTokenClassification: BERT's head (dropout, classifier) on RobertaModel."""

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


class RobertaForQuestionAnswering(RobertaPreTrainedModel, ModelWithHead):
    """transformers' RobertaForQuestionAnswering: BERT's head (qa_outputs) on RobertaModel."""

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
# RoBERTa's classes, as integrations.Trainer and CrossEncoder check and as when its heads inherited BERT's:
# virtual subclasses (PreTrainedModel is an ABC), so each head's MRO stays RoBERTa's own.
for bert_class, ours in (
    (BertPreTrainedModel, RobertaPreTrainedModel),
    (BertForSequenceClassification, RobertaForSequenceClassification),
    (BertForMaskedLM, RobertaForMaskedLM),
    (BertForTokenClassification, RobertaForTokenClassification),
    (BertForQuestionAnswering, RobertaForQuestionAnswering),
):
    bert_class.register(ours)
del bert_class, ours


class XLMRobertaModel(RobertaModel):
    """transformers' XLMRobertaModel: RobertaModel on XLM-RoBERTa's config."""

    config_class = XLMRobertaConfig
    _as_config = family_config(XLMRobertaConfig)


class XLMRobertaPreTrainedModel(PreTrainedModel):
    """transformers' XLMRobertaPreTrainedModel: RobertaPreTrainedModel's on XLM-RoBERTa's config and base model."""

    config_class = XLMRobertaConfig
    base_model_prefix = "roberta"
    base_model_class = XLMRobertaModel
    _as_config = family_config(XLMRobertaConfig)
    _checkpointed_module_types = BertPreTrainedModel._checkpointed_module_types
    _attention_module_types = BertPreTrainedModel._attention_module_types
    _init_weights = BertPreTrainedModel._init_weights


class XLMRobertaForSequenceClassification(XLMRobertaPreTrainedModel, ModelWithHead):
    """transformers' XLMRobertaForSequenceClassification: RobertaForSequenceClassification's head on XLMRobertaModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForSequenceClassification's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.classifier = RobertaClassificationHead(self.config)
        self.post_init()

    forward = sequence_classification_forward
    classify = RobertaForSequenceClassification.classify


class XLMRobertaForMaskedLM(XLMRobertaPreTrainedModel, ModelWithHead):
    """transformers' XLMRobertaForMaskedLM: RobertaForMaskedLM's head on XLMRobertaModel."""

    output_embeddings = RobertaForMaskedLM.output_embeddings
    _tied_weights_keys = RobertaForMaskedLM._tied_weights_keys

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForMaskedLM's."""
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.lm_head = RobertaLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward
    _prediction_scores = RobertaForMaskedLM._prediction_scores


class XLMRobertaForTokenClassification(XLMRobertaPreTrainedModel, ModelWithHead):
    """transformers' XLMRobertaForTokenClassification: BERT's head (dropout, classifier) on XLMRobertaModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForTokenClassification's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, self.config.num_labels)
        self.post_init()

    forward = token_classification_forward


class XLMRobertaForQuestionAnswering(XLMRobertaPreTrainedModel, ModelWithHead):
    """transformers' XLMRobertaForQuestionAnswering: BERT's head (qa_outputs) on XLMRobertaModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForQuestionAnswering's (num_labels must be 2)."""
        super().__init__(config)
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    forward = question_answering_forward


class CamembertModel(RobertaModel):
    """transformers' CamembertModel: RobertaModel on CamemBERT's config."""

    config_class = CamembertConfig
    _as_config = family_config(CamembertConfig)


class CamembertPreTrainedModel(PreTrainedModel):
    """transformers' CamembertPreTrainedModel: RobertaPreTrainedModel's on CamemBERT's config and base model."""

    config_class = CamembertConfig
    base_model_prefix = "roberta"
    base_model_class = CamembertModel
    _as_config = family_config(CamembertConfig)
    _checkpointed_module_types = BertPreTrainedModel._checkpointed_module_types
    _attention_module_types = BertPreTrainedModel._attention_module_types
    _init_weights = BertPreTrainedModel._init_weights


class CamembertForSequenceClassification(CamembertPreTrainedModel, ModelWithHead):
    """transformers' CamembertForSequenceClassification: RobertaForSequenceClassification's head on CamembertModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForSequenceClassification's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.classifier = RobertaClassificationHead(self.config)
        self.post_init()

    forward = sequence_classification_forward
    classify = RobertaForSequenceClassification.classify


class CamembertForMaskedLM(CamembertPreTrainedModel, ModelWithHead):
    """transformers' CamembertForMaskedLM: RobertaForMaskedLM's head on CamembertModel."""

    output_embeddings = RobertaForMaskedLM.output_embeddings
    _tied_weights_keys = RobertaForMaskedLM._tied_weights_keys

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForMaskedLM's."""
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.lm_head = RobertaLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward
    _prediction_scores = RobertaForMaskedLM._prediction_scores


class CamembertForTokenClassification(CamembertPreTrainedModel, ModelWithHead):
    """transformers' CamembertForTokenClassification: BERT's head (dropout, classifier) on CamembertModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForTokenClassification's."""
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, self.config.num_labels)
        self.post_init()

    forward = token_classification_forward


class CamembertForQuestionAnswering(CamembertPreTrainedModel, ModelWithHead):
    """transformers' CamembertForQuestionAnswering: BERT's head (qa_outputs) on CamembertModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """As RobertaForQuestionAnswering's (num_labels must be 2)."""
        super().__init__(config)
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    forward = question_answering_forward


# XLM-RoBERTa's and CamemBERT's heads are RoBERTa's under other names, as transformers copies them: isinstance
# against RobertaPreTrainedModel or a RoBERTa head (and through it BERT's) holds, each MRO staying its family's.
for roberta_class, ours in (
    (RobertaPreTrainedModel, XLMRobertaPreTrainedModel),
    (RobertaPreTrainedModel, CamembertPreTrainedModel),
    (RobertaForSequenceClassification, XLMRobertaForSequenceClassification),
    (RobertaForSequenceClassification, CamembertForSequenceClassification),
    (RobertaForMaskedLM, XLMRobertaForMaskedLM),
    (RobertaForMaskedLM, CamembertForMaskedLM),
    (RobertaForTokenClassification, XLMRobertaForTokenClassification),
    (RobertaForTokenClassification, CamembertForTokenClassification),
    (RobertaForQuestionAnswering, XLMRobertaForQuestionAnswering),
    (RobertaForQuestionAnswering, CamembertForQuestionAnswering),
):
    roberta_class.register(ours)
del roberta_class, ours
