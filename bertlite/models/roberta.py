"""RoBERTa, XLM-RoBERTa and CamemBERT: BERT's module tree with RoBERTa's positions.

The three share transformers' RobertaModel architecture: the same embeddings, layers and pooler as BERT
(the same state_dict keys under the base model prefix "roberta"), and positions counted from
pad_token_id + 1, padding keeping pad_token_id's row. That one difference is RobertaEmbeddings; the rest is
BertModel's, packed path included (a packed batch's positions start at `first_position`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config import BertConfig, CamembertConfig, RobertaConfig, XLMRobertaConfig, as_bert_config
from bertlite.models.bert import BertEmbeddings, BertModel

__all__ = ["CamembertModel", "RobertaEmbeddings", "RobertaModel", "XLMRobertaModel"]


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
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds)


def _family_config(config_class: type[BertConfig]) -> Any:
    """A model class's _as_config: its own config class, or one made from another library's config."""
    return staticmethod(lambda config: as_bert_config(config, config_class))


class RobertaModel(BertModel):
    """transformers' RobertaModel: BertModel with RoBERTa's embeddings and config."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    embeddings_class = RobertaEmbeddings
    _as_config = _family_config(RobertaConfig)


class XLMRobertaModel(RobertaModel):
    """transformers' XLMRobertaModel: RobertaModel on XLM-RoBERTa's config."""

    config_class = XLMRobertaConfig
    _as_config = _family_config(XLMRobertaConfig)


class CamembertModel(RobertaModel):
    """transformers' CamembertModel: RobertaModel on CamemBERT's config."""

    config_class = CamembertConfig
    _as_config = _family_config(CamembertConfig)
