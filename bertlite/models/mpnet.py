"""MPNet: BERT's module tree under MPNet's names, with a relative position bias every layer shares.

transformers' MPNetModel differs from BERT in four places, each one class here: the embeddings have no
token types and count positions from padding_idx + 1 = 2, as RoBERTa's (MPNetEmbeddings); attention's
Linears are `attention.attn.{q,k,v,o}`, and its residual's LayerNorm is `attention.LayerNorm`
(MPNetAttention); the encoder holds one table, `relative_attention_bias`, whose rows (one per bucket of
the distance between query and key) are added to every layer's scaled scores (MPNetEncoder.position_bias);
the forward takes no token_type_ids. The rest is BertModel's, the packed path included: a packed sequence of
length L reads the [:L, :L] corner of one grid's bias (bertlite.layers.attention). The heads are MPNet's own
classes (MPNetPreTrainedModel and ModelWithHead), in MPNet's argument order, with RoBERTa's modules (masked LM;
the sequence classifier on the first token) and BERT's (tokens, multiple choice, question answering).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config import BertConfig, MPNetConfig
from bertlite.config.families import MPNET_POSITION_BUCKETS
from bertlite.layers.attention import DEFAULT_ATTENTION
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.models.bert import (
    BertEncoder,
    BertIntermediate,
    BertModel,
    BertOutput,
    BertPreTrainedModel,
    BertSelfAttention,
)
from bertlite.models.heads import (
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForTokenClassification,
    add_dropout_classifier,
    bert_inputs,
    check_span_labels,
    family_config,
    masked_lm_forward,
    multiple_choice_forward,
    question_answering_forward,
    sequence_classification_forward,
    token_classification_forward,
)
from bertlite.models.inputs import packed_position_ids
from bertlite.models.modeling_utils import ModelWithHead, PreTrainedModel
from bertlite.models.outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from bertlite.models.roberta import (
    RobertaClassificationHead,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaLMHead,
)

# transformers' MPNetEmbeddings pads with row 1 whatever config.pad_token_id says.
PADDING_IDX = 1
# Distances up to this many tokens share the buckets' logarithmic tail (transformers' max_distance).
MAX_DISTANCE = 128


def relative_position_bucket(relative_position: Tensor, num_buckets: int = MPNET_POSITION_BUCKETS) -> Tensor:
    """transformers' MPNetEncoder.relative_position_bucket: a bucket per signed distance, op for op.

    Half the buckets are for keys before the query, half for keys after; in each half, distances below a
    quarter of num_buckets have a bucket each, longer ones share logarithmically wider buckets up to
    MAX_DISTANCE, and any farther key falls in the last.

    Args:
        relative_position: key position - query position, any shape.
        num_buckets: buckets in all.

    Returns:
        The bucket of each distance, a long tensor of the same shape.
    """
    half = num_buckets // 2
    n = -relative_position
    bucket = (n < 0).to(torch.long) * half
    n = torch.abs(n)
    max_exact = half // 2
    # log(0) is -inf at distance 0, where torch.where takes the exact bucket instead.
    scaled = torch.log(n.float() / max_exact) / math.log(MAX_DISTANCE / max_exact) * (half - max_exact)
    large = max_exact + scaled.to(torch.long)
    large = torch.min(large, torch.full_like(large, half - 1))
    return bucket + torch.where(n < max_exact, n, large)


class MPNetEmbeddings(nn.Module):
    """transformers' MPNetEmbeddings: words plus positions counted from padding_idx + 1; no token types."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.padding_idx = PADDING_IDX
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=self.padding_idx)
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=self.padding_idx
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.first_position = self.padding_idx + 1  # a packed sequence's first position (BertModel reads it)

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """BertEmbeddings' call, token_type_ids ignored (MPNet has none); positions from the ids when not
        given: padding_idx + 1 onwards for real tokens, padding_idx for padding (from inputs_embeds: every
        position counts)."""
        if position_ids is None:
            if input_ids is not None:
                real = input_ids.ne(self.padding_idx).int()
                position_ids = (torch.cumsum(real, dim=1).type_as(real) * real).long() + self.padding_idx
            else:
                length, first = inputs_embeds.shape[1], self.first_position
                position_ids = torch.arange(first, length + first, device=inputs_embeds.device).unsqueeze(0)  # (1, T)
        elif input_ids is not None and input_ids.dim() == 1:
            position_ids = packed_position_ids(input_ids, position_ids, self.padding_idx)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class MPNetSelfAttention(BertSelfAttention):
    """transformers' MPNetSelfAttention: BERT's attention core on Linears q, k and v, and o, the output
    projection, which MPNetAttention applies (so a module swap can fuse the residual add into its GEMM)."""

    projection_names = ("q", "k", "v")

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__(config, attn_implementation)
        self.o = nn.Linear(config.hidden_size, config.hidden_size)


class MPNetAttention(nn.Module):
    """transformers' MPNetAttention: LayerNorm(dropout(attn.o(attention)) + hidden_states)."""

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attn = MPNetSelfAttention(config, attn_implementation)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Set by a module swap whose attn.o takes forward(x, residual=): the add runs inside its GEMM.
        self.fuses_residual = False

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        position_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        context, probs = self.attn(
            hidden_states, attention_bias, output_attentions, layout, first_token_of, position_bias
        )
        if first_token_of is not None:
            hidden_states = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        if self.fuses_residual and not self.training:
            return self.LayerNorm(self.attn.o(context, residual=hidden_states)), probs
        return self.LayerNorm(self.dropout(self.attn.o(context)) + hidden_states), probs


class MPNetIntermediate(BertIntermediate):
    """transformers' MPNetIntermediate: BERT's."""


class MPNetOutput(BertOutput):
    """transformers' MPNetOutput: BERT's."""


class MPNetLayer(nn.Module):
    """transformers' MPNetLayer: attention, then the feed-forward (intermediate, output), as BERT's layer."""

    # Where its parts are, for the module swaps (bertlite.layers.roles).
    roles = LayerRoles(
        attention="attention.attn",
        query="attention.attn.q",
        key="attention.attn.k",
        value="attention.attn.v",
        attention_output="attention.attn.o",
        intermediate="intermediate.dense",
        activation="intermediate.intermediate_act_fn",
        output="output.dense",
        residual_owners={"attention_output": "attention", "output": "output"},
    )

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = MPNetAttention(config, attn_implementation)
        self.intermediate = MPNetIntermediate(config)
        self.output = MPNetOutput(config)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        position_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        attention_output, probs = self.attention(
            hidden_states, attention_bias, output_attentions, layout, first_token_of, position_bias
        )
        return self.output(self.intermediate(attention_output), attention_output), probs


class MPNetEncoder(BertEncoder):
    """transformers' MPNetEncoder: the layers, and the relative attention bias table they share."""

    layer_class = MPNetLayer

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__(config, attn_implementation)
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_attention_heads)

    def position_bias(self, hidden_states: Tensor, layout: PackedLayout | None) -> Tensor:
        """Each head's bias for each (query, key) pair of positions, from the bucket of their distance.

        Args:
            hidden_states: the embeddings, (B, T, H) or packed (N, H).
            layout: the packed batch's layout; None for a padded batch.

        Returns:
            (1, nh, T, T), T the padded length or the layout's max_length; every sequence starts at
            position 0, so it serves every sequence (transformers makes B copies of it).
        """
        length = hidden_states.shape[1] if layout is None else layout.max_length
        positions = torch.arange(length, dtype=torch.long, device=hidden_states.device)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None])  # (T, T): key - query
        values = self.relative_attention_bias(buckets)  # (T, T, nh)
        return values.permute(2, 0, 1).unsqueeze(0).contiguous()  # (1, nh, T, T)


class MPNetModel(BertModel):
    """transformers' MPNetModel: BertModel with MPNet's embeddings, layers, relative bias and config."""

    config_class = MPNetConfig
    base_model_prefix = "mpnet"
    embeddings_class = MPNetEmbeddings
    encoder_class = MPNetEncoder
    _as_config = family_config(MPNetConfig)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        lengths: Tensor | None = None,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Tensor, ...]:
        """BertModel.forward in transformers' MPNet order: no token_type_ids.

        Args:
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states,
                return_dict, lengths, layout, first_token_of: as in BertModel.forward (positions count
                from 2).
            **kwargs: as in BertModel.forward; token_type_ids is ignored, as transformers' MPNet ignores it
                (the jobs pass a tokenizer's zeros).

        Returns:
            As BertModel.forward.

        Raises:
            As BertModel.forward.
        """
        kwargs.pop("token_type_ids", None)
        return super().forward(
            input_ids,
            attention_mask,
            None,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
            return_dict,
            lengths=lengths,
            layout=layout,
            first_token_of=first_token_of,
            **kwargs,
        )


class MPNetPreTrainedModel(PreTrainedModel):
    """transformers' MPNetPreTrainedModel: what the MPNet heads share: the config, the base model under "mpnet",
    and BERT's init and module types (MPNetModel is BertModel's tree)."""

    config_class = MPNetConfig
    base_model_prefix = "mpnet"
    base_model_class = MPNetModel
    _as_config = family_config(MPNetConfig)
    _checkpointed_module_types = BertPreTrainedModel._checkpointed_module_types
    _attention_module_types = BertPreTrainedModel._attention_module_types
    _init_weights = BertPreTrainedModel._init_weights


def mpnet_inputs(
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
    kwargs: dict[str, Any],
) -> dict[str, Tensor]:
    """An MPNet head's inputs by name, for its base model; token_type_ids leave kwargs (ignored, as transformers'
    MPNet ignores them)."""
    kwargs.pop("token_type_ids", None)
    return bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds)


class MPNetForMaskedLM(MPNetPreTrainedModel, ModelWithHead):
    """transformers' MPNetForMaskedLM: RoBERTa's lm_head (MPNetLMHead is the same) on MPNetModel."""

    output_embeddings = "lm_head.decoder"
    _tied_weights_keys = {
        "lm_head.decoder.weight": "mpnet.embeddings.word_embeddings.weight",
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
        """BertForMaskedLM.forward in MPNet's argument order, through lm_head."""
        inputs = mpnet_inputs(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        return masked_lm_forward(self, **inputs, labels=labels, **kwargs)

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.lm_head(sequence_output)


class MPNetForSequenceClassification(MPNetPreTrainedModel, ModelWithHead):
    """transformers' MPNetForSequenceClassification: RoBERTa's classifier on the first token, on MPNetModel."""

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
        # transformers' MPNet heads drop out at hidden_dropout_prob, whatever classifier_dropout says.
        self.classifier.dropout = nn.Dropout(self.config.hidden_dropout_prob)
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
    ) -> SequenceClassifierOutput | tuple[Tensor, ...]:
        """BertForSequenceClassification.forward in MPNet's argument order; the classifier reads the first token."""
        inputs = mpnet_inputs(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        return sequence_classification_forward(self, **inputs, labels=labels, **kwargs)

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """BertForSequenceClassification.classify: MPNet's head reads the first tokens (B, H)."""
        return self.classifier(first_tokens[:, None])


class MPNetForTokenClassification(MPNetPreTrainedModel, ModelWithHead):
    """transformers' MPNetForTokenClassification: BERT's head (dropout, classifier) on MPNetModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertForTokenClassification's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        # transformers' MPNet heads drop out at hidden_dropout_prob, whatever classifier_dropout says.
        add_dropout_classifier(self, self.config.num_labels, nn.Dropout(self.config.hidden_dropout_prob))
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
        """BertForTokenClassification.forward in MPNet's argument order."""
        inputs = mpnet_inputs(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        return token_classification_forward(self, **inputs, labels=labels, **kwargs)


class MPNetForMultipleChoice(MPNetPreTrainedModel, ModelWithHead):
    """transformers' MPNetForMultipleChoice: BERT's head (the pooler's output, one score per choice) on MPNetModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model, with its pooler, and its head.

        Args:
            config: the model's config.
            attn_implementation: as BertForMultipleChoice's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        # one score per choice; dropout as MPNetForTokenClassification's
        add_dropout_classifier(self, 1, nn.Dropout(self.config.hidden_dropout_prob))
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
        """BertForMultipleChoice.forward in MPNet's argument order: inputs (B, num_choices, T)."""
        inputs = mpnet_inputs(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        return multiple_choice_forward(self, **inputs, labels=labels, **kwargs)

    def choice_scores(self, outputs: BaseModelOutputWithPooling) -> Tensor:
        """(B * num_choices, 1) scores from the base model's outputs of every choice: BERT's, from the pooler output."""
        return self.classifier(self.dropout(outputs.pooler_output))


class MPNetForQuestionAnswering(MPNetPreTrainedModel, ModelWithHead):
    """transformers' MPNetForQuestionAnswering: BERT's head (qa_outputs) on MPNetModel."""

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

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        *,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        **kwargs: Any,
    ) -> QuestionAnsweringModelOutput | tuple[Tensor, ...]:
        """BertForQuestionAnswering.forward in MPNet's argument order."""
        inputs = mpnet_inputs(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        return question_answering_forward(
            self, **inputs, start_positions=start_positions, end_positions=end_positions, **kwargs
        )


# isinstance(model, BertPreTrainedModel), isinstance(model, BertForSequenceClassification) and the like hold for
# MPNet's classes, as integrations.Trainer and CrossEncoder check and as when its heads inherited BERT's and RoBERTa's:
# virtual subclasses (PreTrainedModel is an ABC), so each head's MRO stays MPNet's own.
for bert_class, ours in (
    (BertPreTrainedModel, MPNetPreTrainedModel),
    (RobertaForMaskedLM, MPNetForMaskedLM),
    (RobertaForSequenceClassification, MPNetForSequenceClassification),
    (BertForTokenClassification, MPNetForTokenClassification),
    (BertForMultipleChoice, MPNetForMultipleChoice),
    (BertForQuestionAnswering, MPNetForQuestionAnswering),
):
    bert_class.register(ours)
del bert_class, ours
