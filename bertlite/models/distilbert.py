"""DistilBERT: BERT's shared core under DistilBERT's names, and its heads.

transformers' DistilBertModel is BERT's post-LayerNorm encoder with other names (`transformer.layer.N.attention.
{q_lin,k_lin,v_lin,out_lin}`, `sa_layer_norm`, `ffn.{lin1,lin2}`, `output_layer_norm`), no token types, no pooler,
LayerNorm eps fixed at 1e-12 and, optionally, fixed sinusoidal positions. Here the attention is BertSelfAttention
(the kernels by name, the packed path, the first-token path), the encoder is BertEncoder and the forward is
BertModel's; TransformerBlock.roles tells the module swaps (oneDNN, int8) where its Linears are. The heads are
DistilBERT's own classes (DistilBertPreTrainedModel and ModelWithHead), in its argument order, with its modules:
the masked-LM head is vocab_transform, activation, vocab_layer_norm and vocab_projector; the sequence classifier
reads the first token through pre_classifier and a ReLU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config import BertConfig, DistilBertConfig, as_bert_config, bind_attention
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import DEFAULT_ATTENTION, check_attn_implementation
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.models.bert import BertEncoder, BertModel, BertPreTrainedModel, BertSelfAttention
from bertlite.models.heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    add_dropout_classifier,
    bert_inputs,
    check_span_labels,
    masked_lm_forward,
    multiple_choice_forward,
    sequence_classification_forward,
    span_outputs,
    token_classification_forward,
)
from bertlite.models.modeling_utils import ModelWithHead, PreTrainedModel
from bertlite.models.outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

# transformers' DistilBERT fixes every LayerNorm's eps (its config has no layer_norm_eps).
LAYER_NORM_EPS = 1e-12


def create_sinusoidal_embeddings(n_pos: int, dim: int, out: Tensor) -> Tensor:
    """Fill `out` (n_pos, dim) with transformers' sinusoidal positions: sin on even columns, cos on odd ones.

    Computed in float64 with numpy and rounded once, as transformers computes them, so the table is bitwise its.

    Args:
        n_pos: the positions (rows).
        dim: the width (columns).
        out: the (n_pos, dim) tensor to fill.

    Returns:
        `out`.
    """
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    with torch.no_grad():
        out[:, 0::2] = torch.as_tensor(np.sin(position_enc[:, 0::2]), dtype=torch.float32)
        out[:, 1::2] = torch.as_tensor(np.cos(position_enc[:, 1::2]), dtype=torch.float32)
    return out


class Embeddings(nn.Module):
    """transformers' DistilBERT Embeddings: word and position vectors, LayerNorm, dropout (no token types)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.first_position = 0  # a packed batch's positions start here (BertModel reads it)

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """BertEmbeddings' call; token_type_ids are ignored (DistilBERT has none), as transformers ignores them."""
        if input_ids is not None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, H), or packed (N, H)
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)  # (1, T)
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class DistilBertSelfAttention(BertSelfAttention):
    """BertSelfAttention on q_lin / k_lin / v_lin, and out_lin on its context (transformers' module of this name)."""

    projection_names = ("q_lin", "k_lin", "v_lin")

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__(config, attn_implementation)
        self.out_lin = nn.Linear(config.hidden_size, config.hidden_size)
        # Set by the module swaps whose out_lin takes forward(x, residual=) (layers.roles' residual_owners).
        self.fuses_residual = False

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        residual: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """BertSelfAttention's forward, then out_lin; residual (inference with fuses_residual): added in its GEMM."""
        context, probs = super().forward(
            hidden_states, attention_bias, output_attentions, layout=layout, first_token_of=first_token_of
        )
        if residual is not None:
            return self.out_lin(context, residual=residual), probs
        return self.out_lin(context), probs


class FFN(nn.Module):
    """transformers' DistilBERT FFN: lin1, activation, lin2, dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.lin1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.lin2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that fuses it into lin1's GEMM
        self.activation = ACT2FN[config.hidden_act]
        self.fuses_residual = False  # as DistilBertSelfAttention's, for lin2

    def forward(self, hidden_states: Tensor, residual: Tensor | None = None) -> Tensor:
        """(..., H) -> (..., H); residual (inference with fuses_residual): added in lin2's GEMM, no dropout."""
        hidden_states = self.activation(self.lin1(hidden_states))
        if residual is not None:
            return self.lin2(hidden_states, residual=residual)
        return self.dropout(self.lin2(hidden_states))


class TransformerBlock(nn.Module):
    """One DistilBERT layer: attention, sa_layer_norm(+ residual), ffn, output_layer_norm(+ residual)."""

    roles = LayerRoles(
        attention="attention",
        query="attention.q_lin",
        key="attention.k_lin",
        value="attention.v_lin",
        attention_output="attention.out_lin",
        intermediate="ffn.lin1",
        activation="ffn.activation",
        output="ffn.lin2",
        residual_owners={"attention_output": "attention", "output": "ffn"},
    )

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = DistilBertSelfAttention(config, attn_implementation)
        self.sa_layer_norm = nn.LayerNorm(config.hidden_size, eps=LAYER_NORM_EPS)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(config.hidden_size, eps=LAYER_NORM_EPS)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """BertLayer's call: (B, T, H) with an additive bias, or packed (N, H) rows (first_token_of: (R, H) out)."""
        residual = hidden_states if first_token_of is None else hidden_states[layout.starts[first_token_of]]
        if self.attention.fuses_residual and not self.training:
            attention_output, probs = self.attention(
                hidden_states, attention_bias, output_attentions, layout, first_token_of, residual=residual
            )
        else:
            attention_output, probs = self.attention(
                hidden_states, attention_bias, output_attentions, layout, first_token_of
            )
            attention_output = attention_output + residual
        attention_output = self.sa_layer_norm(attention_output)
        if self.ffn.fuses_residual and not self.training:
            return self.output_layer_norm(self.ffn(attention_output, residual=attention_output)), probs
        return self.output_layer_norm(self.ffn(attention_output) + attention_output), probs


class Transformer(BertEncoder):
    """BertEncoder of TransformerBlocks (transformers' DistilBERT Transformer)."""

    layer_class = TransformerBlock

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__(config, attn_implementation)
        self.n_layers = config.num_hidden_layers


def _distilbert_config(config: Any) -> DistilBertConfig:
    return as_bert_config(config, DistilBertConfig)


class DistilBertModel(BertModel):
    """transformers' DistilBertModel: embeddings and `transformer`, BertModel's forward (padded, packed); no pooler."""

    config_class = DistilBertConfig
    base_model_prefix = "distilbert"
    embeddings_class = Embeddings
    _as_config = staticmethod(_distilbert_config)

    def __init__(
        self, config: BertConfig, add_pooling_layer: bool = False, attn_implementation: str | None = None
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: a DistilBertConfig, or transformers' (its values are copied).
            add_pooling_layer: taken as BertModel takes it, so code written for BertModel runs; DistilBERT has
                no pooler, so True is refused.
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's, else "sdpa".

        Raises:
            ValueError: add_pooling_layer=True, or an unknown attention name.
        """
        if add_pooling_layer:
            raise ValueError("DistilBERT has no pooler: add_pooling_layer=True is not possible (pool the first token)")
        BertPreTrainedModel.__init__(self, config)  # BertModel's modules are built here, under DistilBERT's names
        config = self.config
        if attn_implementation is None:
            attn_implementation = config._attn_implementation or DEFAULT_ATTENTION
        check_attn_implementation(attn_implementation)
        self.embeddings = Embeddings(config)
        self.transformer = Transformer(config, attn_implementation)
        self.pooler = None
        self.init_weights()
        bind_attention(config, self)

    @property
    def encoder(self) -> Transformer:
        """`transformer` under BertModel's name, which the shared forward and the module swaps read."""
        return self.transformer

    def get_position_embeddings(self) -> nn.Embedding:
        """The position embeddings."""
        return self.embeddings.position_embeddings

    @torch.no_grad()
    def resize_position_embeddings(self, new_num_position_embeddings: int) -> None:
        """Give the position table `new_num_position_embeddings` rows, as transformers' method of this name.

        Learned positions keep their first rows (new ones are initialised as at construction); sinusoidal
        ones are computed for the new length. config.max_position_embeddings follows.

        Args:
            new_num_position_embeddings: the rows, >= 1.

        Raises:
            ValueError: not a positive integer.
        """
        if isinstance(new_num_position_embeddings, bool) or not isinstance(new_num_position_embeddings, int):
            raise ValueError(
                f"new_num_position_embeddings must be a positive integer, got {new_num_position_embeddings!r}"
            )
        if new_num_position_embeddings < 1:
            raise ValueError(
                f"new_num_position_embeddings must be a positive integer, got {new_num_position_embeddings}"
            )
        old = self.embeddings.position_embeddings
        if new_num_position_embeddings == old.num_embeddings:
            return
        new = nn.Embedding(
            new_num_position_embeddings, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype
        )
        if self.config.sinusoidal_pos_embds:
            create_sinusoidal_embeddings(new_num_position_embeddings, old.embedding_dim, new.weight)
        else:
            self._init_weights(new)
            kept = min(old.num_embeddings, new_num_position_embeddings)
            new.weight[:kept] = old.weight[:kept]
        self.embeddings.position_embeddings = new
        self.config.max_position_embeddings = new_num_position_embeddings

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, Embeddings) and self.config.sinusoidal_pos_embds:
            create_sinusoidal_embeddings(
                self.config.max_position_embeddings, self.config.hidden_size, module.position_embeddings.weight
            )

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        use_cache: bool | None = None,
        lengths: Tensor | None = None,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Tensor, ...]:
        """BertModel.forward in transformers' DistilBERT argument order (inputs_embeds before position_ids).

        Args:
            input_ids, attention_mask, inputs_embeds, position_ids, output_attentions, output_hidden_states,
                return_dict, use_cache, lengths, layout, first_token_of, **kwargs: as BertModel.forward's.
            token_type_ids: ignored: DistilBERT has no token types (transformers ignores them too), so a
                BERT tokenizer's output and the jobs' batches run unchanged.

        Returns:
            BertModel.forward's output; pooler_output is None.
        """
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=return_dict,
            use_cache=use_cache,
            lengths=lengths,
            layout=layout,
            first_token_of=first_token_of,
            **kwargs,
        )


class DistilBertPreTrainedModel(PreTrainedModel):
    """transformers' DistilBertPreTrainedModel: what the DistilBERT heads share: the config, the base model under
    "distilbert", its position embeddings, and BERT's init and module types (DistilBertModel runs BERT's core)."""

    config_class = DistilBertConfig
    base_model_prefix = "distilbert"
    base_model_class = DistilBertModel
    _as_config = staticmethod(_distilbert_config)
    _checkpointed_module_types = BertPreTrainedModel._checkpointed_module_types
    _attention_module_types = BertPreTrainedModel._attention_module_types
    _init_weights = BertPreTrainedModel._init_weights

    def get_position_embeddings(self) -> nn.Embedding:
        """The base model's position embeddings."""
        return self.distilbert.get_position_embeddings()

    def resize_position_embeddings(self, new_num_position_embeddings: int) -> None:
        """The base model's resize_position_embeddings."""
        self.distilbert.resize_position_embeddings(new_num_position_embeddings)


def distilbert_inputs(
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    inputs_embeds: Tensor | None,
    position_ids: Tensor | None,
    kwargs: dict[str, Any],
) -> dict[str, Tensor]:
    """A DistilBERT head's inputs by name, for its base model; token_type_ids leave kwargs (DistilBERT ignores them)."""
    kwargs.pop("token_type_ids", None)
    return bert_inputs(input_ids, attention_mask, None, position_ids, inputs_embeds)


class DistilBertForMaskedLM(DistilBertPreTrainedModel, ModelWithHead):
    """transformers' DistilBertForMaskedLM: vocab_transform, activation, vocab_layer_norm, vocab_projector (tied to
    the word embeddings when config.tie_word_embeddings)."""

    output_embeddings = "vocab_projector"
    _tied_weights_keys = {"vocab_projector.weight": "distilbert.embeddings.word_embeddings.weight"}

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its masked-LM head.

        Args:
            config: the model's config.
            attn_implementation: as DistilBertModel's.
        """
        super().__init__(config)
        config = self.config
        self.activation = ACT2FN[config.hidden_act]
        self._add_base_model(attn_implementation)
        self.vocab_transform = nn.Linear(config.hidden_size, config.hidden_size)
        self.vocab_layer_norm = nn.LayerNorm(config.hidden_size, eps=LAYER_NORM_EPS)
        self.vocab_projector = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.vocab_projector(self.vocab_layer_norm(self.activation(self.vocab_transform(sequence_output))))

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> MaskedLMOutput | tuple[Tensor, ...]:
        """BertForMaskedLM.forward in transformers' DistilBERT argument order (labels before position_ids)."""
        inputs = distilbert_inputs(input_ids, attention_mask, inputs_embeds, position_ids, kwargs)
        return masked_lm_forward(self, **inputs, labels=labels, **kwargs)


class DistilBertForSequenceClassification(DistilBertPreTrainedModel, ModelWithHead):
    """transformers' DistilBertForSequenceClassification: the first token through pre_classifier, ReLU, dropout
    (seq_classif_dropout) and classifier."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as DistilBertModel's.
        """
        super().__init__(config)
        config = self.config
        self.num_labels = config.num_labels
        self._add_base_model(attn_implementation)
        self.pre_classifier = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def classify(self, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
        """BertForSequenceClassification.classify: DistilBERT's head reads the first tokens (B, H)."""
        return self.classifier(self.dropout(F.relu(self.pre_classifier(first_tokens))))

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Tensor, ...]:
        """BertForSequenceClassification.forward in transformers' DistilBERT argument order."""
        inputs = distilbert_inputs(input_ids, attention_mask, inputs_embeds, position_ids, kwargs)
        return sequence_classification_forward(self, **inputs, labels=labels, **kwargs)


class DistilBertForMultipleChoice(DistilBertPreTrainedModel, ModelWithHead):
    """transformers' DistilBertForMultipleChoice: each choice's first token through pre_classifier, ReLU, dropout
    (seq_classif_dropout) and a one-score classifier."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config.
            attn_implementation: as DistilBertModel's.
        """
        super().__init__(config)
        config = self.config
        self._add_base_model(attn_implementation)
        self.pre_classifier = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> MultipleChoiceModelOutput | tuple[Tensor, ...]:
        """BertForMultipleChoice.forward in transformers' DistilBERT argument order: inputs (B, num_choices, T)."""
        inputs = distilbert_inputs(input_ids, attention_mask, inputs_embeds, position_ids, kwargs)
        return multiple_choice_forward(self, **inputs, labels=labels, **kwargs)

    def choice_scores(self, outputs: BaseModelOutputWithPooling) -> Tensor:
        """(B * num_choices, 1) scores from the base model's outputs of every choice: each one's first token."""
        first = outputs.last_hidden_state[:, 0]  # (B * C, H)
        return self.classifier(self.dropout(F.relu(self.pre_classifier(first))))


class DistilBertForTokenClassification(DistilBertPreTrainedModel, ModelWithHead):
    """transformers' DistilBertForTokenClassification: BERT's head (dropout, classifier) on DistilBertModel."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as DistilBertModel's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, self.config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Tensor, ...]:
        """BertForTokenClassification.forward in transformers' DistilBERT argument order."""
        inputs = distilbert_inputs(input_ids, attention_mask, inputs_embeds, position_ids, kwargs)
        return token_classification_forward(self, **inputs, labels=labels, **kwargs)


class DistilBertForQuestionAnswering(DistilBertPreTrainedModel, ModelWithHead):
    """transformers' DistilBertForQuestionAnswering: dropout (qa_dropout) on the hidden states, then qa_outputs."""

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels must be 2: start, end).
            attn_implementation: as DistilBertModel's.

        Raises:
            ValueError: config.num_labels is not 2.
        """
        super().__init__(config)
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.dropout = nn.Dropout(self.config.qa_dropout)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        position_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> QuestionAnsweringModelOutput | tuple[Tensor, ...]:
        """BertForQuestionAnswering.forward in transformers' DistilBERT argument order."""
        inputs = distilbert_inputs(input_ids, attention_mask, inputs_embeds, position_ids, kwargs)
        outputs = self._encode(**inputs, **kwargs)
        logits = self.qa_outputs(self.dropout(outputs.last_hidden_state))  # (B, T, 2)
        loss, start_logits, end_logits = span_outputs(logits, start_positions, end_positions)
        output = QuestionAnsweringModelOutput(loss, start_logits, end_logits, outputs.hidden_states, outputs.attentions)
        return self._finish(output, kwargs)


# isinstance(model, BertPreTrainedModel), isinstance(model, BertForSequenceClassification) and the like hold for
# DistilBERT's classes, as integrations.Trainer and CrossEncoder check and as when its heads inherited BERT's:
# virtual subclasses (PreTrainedModel is an ABC), so each head's MRO stays DistilBERT's own.
for bert_class, ours in (
    (BertPreTrainedModel, DistilBertPreTrainedModel),
    (BertForMaskedLM, DistilBertForMaskedLM),
    (BertForSequenceClassification, DistilBertForSequenceClassification),
    (BertForMultipleChoice, DistilBertForMultipleChoice),
    (BertForTokenClassification, DistilBertForTokenClassification),
    (BertForQuestionAnswering, DistilBertForQuestionAnswering),
):
    bert_class.register(ours)
del bert_class, ours
