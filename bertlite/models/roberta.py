"""RoBERTa, XLM-RoBERTa and CamemBERT: BERT's module tree with RoBERTa's positions.

The three share transformers' RobertaModel architecture: the same embeddings, layers and pooler as BERT
(the same state_dict keys under the base model prefix "roberta"), and positions counted from
pad_token_id + 1, padding keeping pad_token_id's row. That one difference is RobertaEmbeddings; the rest is
BertModel's, packed path included (a packed batch's positions start at `first_position`). The heads are
BERT's where transformers' are the same modules (token classification, question answering), and their own
where they differ: the sequence classifier reads the first token through a dense + tanh layer (no pooler),
the masked-LM head is `lm_head` (dense, GELU, layer_norm, decoder).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config import BertConfig, CamembertConfig, RobertaConfig, XLMRobertaConfig, as_bert_config
from bertlite.models.bert import BertEmbeddings, BertModel
from bertlite.models.heads import (
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    _BertWithHead,
    _classifier_dropout,
)
from bertlite.models.outputs import BaseModelOutputWithPooling


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


def packed_position_ids(input_ids: Tensor, position_ids: Tensor, padding_idx: int) -> Tensor:
    """A packed batch's positions as transformers gives them from the ids: a padding_idx token in a text
    (a literal "<pad>") takes position padding_idx and is not counted.

    Args:
        input_ids: (N,) the packed ids.
        position_ids: (N,) padding_idx + 1 + each row's index in its sequence (BertModel's packed path).
        padding_idx: the pad id, whose position row no real token uses.

    Returns:
        (N,) positions.
    """
    pad = input_ids.eq(padding_idx).long()
    pads = torch.cumsum(pad, 0)  # pads up to each row, the row included
    starts = torch.arange(len(input_ids), device=input_ids.device) - (position_ids - padding_idx - 1)
    pads_in_sequence = pads - pads[starts] + pad[starts]  # from the row's sequence start to the row
    return torch.where(pad.bool(), padding_idx, position_ids - pads_in_sequence)


def _family_config(config_class: type[BertConfig]) -> Any:
    """A model class's _as_config: its own config class, or one made from another library's config."""
    return staticmethod(lambda config: as_bert_config(config, config_class))


class RobertaModel(BertModel):
    """transformers' RobertaModel: BertModel with RoBERTa's embeddings and config."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    embeddings_class = RobertaEmbeddings
    _as_config = _family_config(RobertaConfig)


class RobertaClassificationHead(nn.Module):
    """transformers' RobertaClassificationHead: the first token through dropout, dense, tanh, dropout, out_proj."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = _classifier_dropout(config)
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


class _RobertaHead:
    """What the RoBERTa heads set on a BERT head: the base model, its prefix and the config class."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    base_model_class = RobertaModel
    _as_config = _family_config(RobertaConfig)


def first_tokens(hidden: Tensor, forward_kwargs: dict[str, Any]) -> Tensor:
    """Each sequence's first token as (B, 1, H): from (B, T, H), or from a packed batch's (N, H) rows."""
    if hidden.dim() == 3:
        return hidden[:, :1]
    layout = forward_kwargs.get("layout")
    lengths = layout.lengths if layout is not None else torch.as_tensor(forward_kwargs["lengths"], device=hidden.device)
    return hidden[torch.cumsum(lengths, 0) - lengths][:, None]  # (B, 1, H)


class RobertaForSequenceClassification(_RobertaHead, BertForSequenceClassification):
    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head (no pooler: the classifier reads the first token).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertForSequenceClassification's.
        """
        _BertWithHead.__init__(self, config)
        config = self.config
        self.num_labels = config.num_labels
        self._add_base_model(config, attn_implementation, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()

    def _classify(self, outputs: BaseModelOutputWithPooling, forward_kwargs: dict[str, Any]) -> Tensor:
        return self.classifier(first_tokens(outputs.last_hidden_state, forward_kwargs))

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """BertForSequenceClassification.classify: RoBERTa's head reads the first tokens (B, H)."""
        return self.classifier(first_tokens[:, None])


class RobertaForMaskedLM(_RobertaHead, BertForMaskedLM):
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
        _BertWithHead.__init__(self, config)
        self._add_base_model(self.config, attn_implementation, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(self.config)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, RobertaLMHead):
            module.bias.zero_()  # a bare Parameter, which the per-layer scheme does not reach

    def get_output_embeddings(self) -> nn.Linear:
        """The language-model decoder, lm_head.decoder."""
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        """Replace the decoder (and the bias it uses) with `new_embeddings`."""
        self.lm_head.decoder = new_embeddings
        self.lm_head.bias = new_embeddings.bias

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        return self.lm_head(sequence_output)


class RobertaForTokenClassification(_RobertaHead, BertForTokenClassification):
    """transformers' RobertaForTokenClassification: BERT's head on RobertaModel."""


class RobertaForQuestionAnswering(_RobertaHead, BertForQuestionAnswering):
    """transformers' RobertaForQuestionAnswering: BERT's head on RobertaModel."""


class XLMRobertaModel(RobertaModel):
    """transformers' XLMRobertaModel: RobertaModel on XLM-RoBERTa's config."""

    config_class = XLMRobertaConfig
    _as_config = _family_config(XLMRobertaConfig)


class _XLMRobertaHead:
    config_class = XLMRobertaConfig
    base_model_class = XLMRobertaModel
    _as_config = _family_config(XLMRobertaConfig)


class XLMRobertaForSequenceClassification(_XLMRobertaHead, RobertaForSequenceClassification):
    """transformers' XLMRobertaForSequenceClassification: RobertaForSequenceClassification on XLM-RoBERTa's config."""


class XLMRobertaForMaskedLM(_XLMRobertaHead, RobertaForMaskedLM):
    """transformers' XLMRobertaForMaskedLM: RobertaForMaskedLM on XLM-RoBERTa's config."""


class XLMRobertaForTokenClassification(_XLMRobertaHead, RobertaForTokenClassification):
    """transformers' XLMRobertaForTokenClassification: RobertaForTokenClassification on XLM-RoBERTa's config."""


class XLMRobertaForQuestionAnswering(_XLMRobertaHead, RobertaForQuestionAnswering):
    """transformers' XLMRobertaForQuestionAnswering: RobertaForQuestionAnswering on XLM-RoBERTa's config."""


class CamembertModel(RobertaModel):
    """transformers' CamembertModel: RobertaModel on CamemBERT's config."""

    config_class = CamembertConfig
    _as_config = _family_config(CamembertConfig)


class _CamembertHead:
    config_class = CamembertConfig
    base_model_class = CamembertModel
    _as_config = _family_config(CamembertConfig)


class CamembertForSequenceClassification(_CamembertHead, RobertaForSequenceClassification):
    """transformers' CamembertForSequenceClassification: RobertaForSequenceClassification on CamemBERT's config."""


class CamembertForMaskedLM(_CamembertHead, RobertaForMaskedLM):
    """transformers' CamembertForMaskedLM: RobertaForMaskedLM on CamemBERT's config."""


class CamembertForTokenClassification(_CamembertHead, RobertaForTokenClassification):
    """transformers' CamembertForTokenClassification: RobertaForTokenClassification on CamemBERT's config."""


class CamembertForQuestionAnswering(_CamembertHead, RobertaForQuestionAnswering):
    """transformers' CamembertForQuestionAnswering: RobertaForQuestionAnswering on CamemBERT's config."""
