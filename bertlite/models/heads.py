"""Task heads on BertModel, under transformers' class, attribute and state_dict names.

Each class is the transformers class of the same name: the base model is `bert`
and the head modules (`cls`, `classifier`, `qa_outputs`) hold the same keys, so a
transformers checkpoint of any head loads key for key, and a loss is computed with
transformers' reductions (mean, ignore_index -100). The masked-LM decoder is the
word-embedding matrix itself when config.tie_word_embeddings (the default). Their outputs are
in models.outputs (and importable from here).

The bodies every family's heads share are plain functions here: one forward per task in BERT's argument order
(sequence_classification_forward, masked_lm_forward, token_classification_forward, question_answering_forward,
multiple_choice_forward), which a head binds as its forward or calls from its own argument order, and their parts
(bert_inputs, add_dropout_classifier, pooled_classify, classifier_dropout, family_config, first_tokens,
sequence_classification_loss, token_loss, span_outputs, flat_choices). Each family writes its own head classes on
its own PreTrainedModel and models.modeling_utils.ModelWithHead, as transformers does.

Over 700 lines: BERT's eight head classes and the one forward per task that every family's heads bind or call
stay together, in the module the families import them from.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config import BertConfig, as_bert_config
from bertlite.layers.activations import ACT2FN
from bertlite.models.bert import BertModel, BertPreTrainedModel
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.outputs import (
    BaseModelOutputWithPooling,
    BertForPreTrainingOutput,
    CausalLMOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from bertlite.utils.warn import warn_user

IGNORE_INDEX = -100  # label value that adds nothing to a loss, as in transformers

# --- head modules --------------------------------------------------------------


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        # When tied, decoder.weight is the word-embedding matrix and decoder.bias is
        # `bias`; untied, `bias` is still a key (transformers keeps it) but unused.
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.decoder(self.transform(hidden_states))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return self.predictions(sequence_output)


class BertOnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled_output: Tensor) -> Tensor:
        return self.seq_relationship(pooled_output)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output: Tensor, pooled_output: Tensor) -> tuple[Tensor, Tensor]:
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


# --- models --------------------------------------------------------------------


def bert_inputs(
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    token_type_ids: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
) -> dict[str, Tensor]:
    """A head's inputs by BertModel.forward's names, for its base model (_encode); those not given left out."""
    inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "position_ids": position_ids,
        "inputs_embeds": inputs_embeds,
    }
    return {name: value for name, value in inputs.items() if value is not None}


def classifier_dropout(config: BertConfig) -> nn.Dropout:
    """The classifier heads' dropout: config.classifier_dropout, else hidden_dropout_prob, as transformers'."""
    return nn.Dropout(config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout)


def family_config(config_class: type[BertConfig]) -> Any:
    """A model class's _as_config: its own config class, or one made from another library's config."""
    return staticmethod(lambda config: as_bert_config(config, config_class))


def first_tokens(hidden: Tensor, forward_kwargs: dict[str, Any]) -> Tensor:
    """Each sequence's first token as (B, 1, H): from (B, T, H), or from a packed batch's (N, H) rows."""
    if hidden.dim() == 3:
        return hidden[:, :1]
    layout = forward_kwargs.get("layout")
    lengths = layout.lengths if layout is not None else torch.as_tensor(forward_kwargs["lengths"], device=hidden.device)
    return hidden[torch.cumsum(lengths, 0) - lengths][:, None]  # (B, 1, H)


def sequence_classification_loss(config: BertConfig, logits: Tensor, labels: Tensor) -> Tensor:
    """transformers' sequence-classification loss by config.problem_type (inferred and stored when unset).

    Args:
        config: the classifier's config (num_labels, problem_type).
        logits: (B, num_labels).
        labels: (B,) floats or class ids, or (B, num_labels) 0/1 floats.

    Returns:
        The loss.
    """
    num_labels = config.num_labels
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return F.mse_loss(logits.squeeze(), labels.squeeze()) if num_labels == 1 else F.mse_loss(logits, labels)
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits, labels)


def token_loss(logits: Tensor, labels: Tensor | None) -> Tensor | None:
    """The mean cross-entropy over the scored tokens (labels -100 elsewhere); None without labels."""
    return None if labels is None else F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def span_outputs(
    logits: Tensor, start_positions: Tensor | None, end_positions: Tensor | None
) -> tuple[Tensor | None, Tensor, Tensor]:
    """The question-answering loss and logits from (B, T, 2) span logits, as transformers computes them.

    Args:
        logits: (B, T, 2) start and end logits.
        start_positions, end_positions: (B,) (or (B, 1)) token indices of the answer span; the loss needs both.
            Positions outside the sequence are clamped to T and add nothing.

    Returns:
        (loss: the mean of the start and end losses, or None; start_logits (B, T); end_logits (B, T)).
    """
    start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))  # (B, T) each
    if start_positions is None or end_positions is None:
        return None, start_logits, end_logits
    if start_positions.dim() > 1:  # (B, 1), as some data loaders give them
        start_positions = start_positions.squeeze(-1)
    if end_positions.dim() > 1:
        end_positions = end_positions.squeeze(-1)
    ignored_index = start_logits.size(1)
    start_positions = start_positions.clamp(0, ignored_index)
    end_positions = end_positions.clamp(0, ignored_index)
    start_loss = F.cross_entropy(start_logits, start_positions, ignore_index=ignored_index)
    end_loss = F.cross_entropy(end_logits, end_positions, ignore_index=ignored_index)
    return (start_loss + end_loss) / 2, start_logits, end_logits


def check_span_labels(model: nn.Module) -> int:
    """A question-answering head's num_labels: 2 (start, end), as its config must say.

    Raises:
        ValueError: config.num_labels is not 2 (transformers would fail later, unpacking the logits).
    """
    if model.config.num_labels != 2:
        raise ValueError(f"{type(model).__name__} needs num_labels=2 (start, end), got {model.config.num_labels}")
    return model.config.num_labels


def flat_choices(owner: str, **inputs: Tensor | None) -> tuple[int, dict[str, Tensor | None]]:
    """A multiple-choice batch as one of sequences: (B, C, T, ...) -> (B * C, T, ...), every choice its own.

    Args:
        owner: the head's class name, for the error.
        **inputs: input_ids, attention_mask, token_type_ids, position_ids (B, C, T) and inputs_embeds
            (B, C, T, H), None where not given.

    Returns:
        (C, the inputs flattened).

    Raises:
        ValueError: neither input_ids nor inputs_embeds, or not of the shape above.
    """
    input_ids, inputs_embeds = inputs.get("input_ids"), inputs.get("inputs_embeds")
    first = input_ids if input_ids is not None else inputs_embeds
    if first is None:
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    if first.dim() != (3 if input_ids is not None else 4):
        name = "input_ids" if input_ids is not None else "inputs_embeds"
        raise ValueError(
            f"{owner} takes {name} of shape (batch, num_choices, seq_len"
            f"{'' if input_ids is not None else ', hidden'}), got {tuple(first.shape)}"
        )
    flat = {name: None if t is None else t.reshape(-1, *t.shape[2:]) for name, t in inputs.items()}  # (B * C, T, ...)
    return first.shape[1], flat


def add_dropout_classifier(model: nn.Module, num_outputs: int, dropout: nn.Dropout | None = None) -> None:
    """A classifier head's modules, in transformers' order: `dropout`, then `classifier` (hidden_size -> num_outputs).

    Args:
        model: the head class being built, its base model already added.
        num_outputs: the classifier's outputs (num_labels, or 1 for a choice's score).
        dropout: the dropout to use; None: classifier_dropout(model.config).
    """
    model.dropout = classifier_dropout(model.config) if dropout is None else dropout
    model.classifier = nn.Linear(model.config.hidden_size, num_outputs)


def pooled_classify(model: nn.Module, first_tokens: Tensor | None, pooled: Tensor | None) -> Tensor:
    """A pooler-reading head's classify (BERT, GTE, NomicBERT): the head alone, for a caller that ran the base model
    itself (bertlite's CrossEncoder).

    Args:
        model: the head (its dropout and classifier).
        first_tokens: (B, H) each sequence's first-token hidden state (unread: these heads read the pooler).
        pooled: (B, H) the pooler output.

    Returns:
        (B, num_labels) logits.
    """
    return model.classifier(model.dropout(pooled))


# --- shared forwards -----------------------------------------------------------
# One forward per task, in BERT's argument order: a head class whose forward is BERT's binds it (`forward =
# token_classification_forward`); a family with another argument order calls it by keyword from its own forward.


def sequence_classification_forward(
    model: ModelWithHead,
    input_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    *,
    labels: Tensor | None = None,
    **kwargs: Any,
) -> SequenceClassifierOutput | tuple[Tensor, ...]:
    """Classify (or regress) each sequence: the head's classify() on the pooler output where the base model has a
    pooler (BERT), else on each sequence's first token (RoBERTa, ELECTRA, MPNet, DistilBERT).

    Args:
        model: the head (its classify(first_tokens, pooled)).
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in BertModel.forward.
        labels: (B,) floats for regression, class ids for single-label, (B, num_labels) 0/1 floats
            for multi-label classification (config.problem_type; inferred from num_labels and the
            labels' dtype when unset, and then stored in the config, as transformers does).
        **kwargs: the base model's other keywords (output_attentions, output_hidden_states, ...) and return_dict.

    Returns:
        SequenceClassifierOutput: loss, logits (B, num_labels), hidden_states and attentions as
        BertModel.forward's; with return_dict=False the tuple of its non-None fields.
    """
    inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
    outputs = model._encode(**inputs, **kwargs)
    pooled = outputs.pooler_output
    first = first_tokens(outputs.last_hidden_state, kwargs)[:, 0] if pooled is None else None  # (B, H)
    logits = model.classify(first, pooled)  # (B, num_labels)
    loss = None if labels is None else sequence_classification_loss(model.config, logits, labels)
    return model._finish(SequenceClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)


def masked_lm_forward(
    model: ModelWithHead,
    input_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    *,
    labels: Tensor | None = None,
    **kwargs: Any,
) -> MaskedLMOutput | tuple[Tensor, ...]:
    """Vocabulary logits for every token through the head's _prediction_scores, and the masked-LM loss.

    Args:
        model: the head (its _prediction_scores(hidden), which SPLADE also runs alone).
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in BertModel.forward.
        labels: (B, T) token ids at masked positions, -100 elsewhere.
        **kwargs: the base model's other keywords (output_attentions, output_hidden_states, ...) and return_dict.

    Returns:
        MaskedLMOutput: loss, logits (B, T, vocab), hidden_states and attentions as
        BertModel.forward's; with return_dict=False the tuple of its non-None fields.
    """
    inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
    outputs = model._encode(**inputs, **kwargs)
    logits = model._prediction_scores(outputs.last_hidden_state)  # (B, T, vocab)
    loss = token_loss(logits, labels)
    return model._finish(MaskedLMOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)


def token_classification_forward(
    model: ModelWithHead,
    input_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    *,
    labels: Tensor | None = None,
    **kwargs: Any,
) -> TokenClassifierOutput | tuple[Tensor, ...]:
    """Classify every token through the head's dropout and classifier.

    Args:
        model: the head (its dropout and classifier, add_dropout_classifier's).
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in BertModel.forward.
        labels: (B, T) class ids, -100 where a token is not scored (padding, sub-words).
        **kwargs: the base model's other keywords (output_attentions, output_hidden_states, ...) and return_dict.

    Returns:
        TokenClassifierOutput: loss, logits (B, T, num_labels), hidden_states and attentions as
        BertModel.forward's; with return_dict=False the tuple of its non-None fields.
    """
    inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
    outputs = model._encode(**inputs, **kwargs)
    logits = model.classifier(model.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
    loss = token_loss(logits, labels)
    return model._finish(TokenClassifierOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)


def question_answering_forward(
    model: ModelWithHead,
    input_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    *,
    start_positions: Tensor | None = None,
    end_positions: Tensor | None = None,
    **kwargs: Any,
) -> QuestionAnsweringModelOutput | tuple[Tensor, ...]:
    """Score every token as the start and the end of the answer span, through the head's qa_outputs.

    Args:
        model: the head (its qa_outputs).
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in BertModel.forward.
        start_positions, end_positions: (B,) token indices of the answer span; the loss needs both.
            Positions outside the sequence are clamped to T and add nothing, as in transformers.
        **kwargs: the base model's other keywords (output_attentions, output_hidden_states, ...) and return_dict.

    Returns:
        QuestionAnsweringModelOutput: loss (mean of the start and end losses),
        start_logits (B, T), end_logits (B, T), hidden_states and attentions as
        BertModel.forward's; with return_dict=False the tuple of its non-None fields.
    """
    inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
    outputs = model._encode(**inputs, **kwargs)
    logits = model.qa_outputs(outputs.last_hidden_state)  # (B, T, 2)
    loss, start_logits, end_logits = span_outputs(logits, start_positions, end_positions)
    output = QuestionAnsweringModelOutput(loss, start_logits, end_logits, outputs.hidden_states, outputs.attentions)
    return model._finish(output, kwargs)


def multiple_choice_forward(
    model: ModelWithHead,
    input_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    *,
    labels: Tensor | None = None,
    **kwargs: Any,
) -> MultipleChoiceModelOutput | tuple[Tensor, ...]:
    """Score each choice of each example: the head's choice_scores on the base model's outputs of every choice.

    Args:
        model: the head (its choice_scores(outputs) -> (B * num_choices, 1)).
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in BertModel.forward, with a
            choices axis: (B, num_choices, T) (inputs_embeds (B, num_choices, T, H)).
        labels: (B,) choice index.
        **kwargs: the base model's other keywords (output_attentions, output_hidden_states, ...) and return_dict.

    Returns:
        MultipleChoiceModelOutput: loss, logits (B, num_choices), hidden_states and attentions as
        BertModel.forward's; with return_dict=False the tuple of its non-None fields.

    Raises:
        ValueError: neither input_ids nor inputs_embeds, or not of the shape above.
    """
    inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
    num_choices, inputs = flat_choices(type(model).__name__, **inputs)
    outputs = model._encode(**inputs, **kwargs)
    logits = model.choice_scores(outputs).view(-1, num_choices)  # (B, C)
    loss = F.cross_entropy(logits, labels) if labels is not None else None
    return model._finish(MultipleChoiceModelOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)


class BertForPreTraining(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel
    output_embeddings = "cls.predictions.decoder"
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        self.cls = BertPreTrainingHeads(config)
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
        next_sentence_label: Tensor | None = None,
        **kwargs: Any,
    ) -> BertForPreTrainingOutput | tuple[Tensor, ...]:
        """Score masked tokens and whether sentence B follows sentence A.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in
                BertModel.forward.
            labels: (B, T) token ids, -100 where not masked. The loss needs both label sets, as in
                transformers.
            next_sentence_label: (B,) 0 = continuation.
            **kwargs: BertModel.forward's other keywords (output_attentions, output_hidden_states, ...)
                and return_dict.

        Returns:
            BertForPreTrainingOutput: loss (masked-LM + next-sentence), prediction_logits
            (B, T, vocab), seq_relationship_logits (B, 2), hidden_states and attentions as
            BertModel.forward's; with return_dict=False the tuple of its non-None fields.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        prediction_scores, seq_relationship_score = self.cls(outputs.last_hidden_state, outputs.pooler_output)
        loss = None
        if labels is not None and next_sentence_label is not None:
            masked_lm_loss = F.cross_entropy(prediction_scores.view(-1, self.config.vocab_size), labels.view(-1))
            next_sentence_loss = F.cross_entropy(seq_relationship_score.view(-1, 2), next_sentence_label.view(-1))
            loss = masked_lm_loss + next_sentence_loss
        output = BertForPreTrainingOutput(
            loss, prediction_scores, seq_relationship_score, outputs.hidden_states, outputs.attentions
        )
        return self._finish(output, kwargs)


class BertLMHeadModel(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel
    output_embeddings = "cls.predictions.decoder"
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        if not config.is_decoder:
            warn_user("BertLMHeadModel without is_decoder=True attends both ways; set is_decoder=True")
        self._add_base_model(attn_implementation)
        self.cls = BertOnlyMLMHead(config)
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
    ) -> CausalLMOutput | tuple[Tensor, ...]:
        """Next-token logits, and the causal-LM loss when labels are given.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in
                BertModel.forward.
            labels: (B, T), usually the input ids; position t's logits are scored against labels[t + 1].
            **kwargs: BertModel.forward's other keywords and return_dict, and two loss options, in kwargs
                as in transformers (so that Trainer does not take them for label columns it needs):
                shift_labels: (B, T) targets already shifted (position t scored against shift_labels[t]);
                the loss still needs labels. num_items_in_batch (Trainer's): the loss is the sum over
                tokens divided by it instead of the mean, as transformers' causal-LM loss.

        Returns:
            CausalLMOutput: loss, logits (B, T, vocab), hidden_states and attentions as
            BertModel.forward's; with return_dict=False the tuple of its non-None fields.
        """
        shift_labels = kwargs.pop("shift_labels", None)
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        logits = self.cls(outputs.last_hidden_state)  # (B, T, vocab)
        loss = None
        if labels is not None:
            # transformers' ForCausalLMLoss: float32 logits; labels shifted left by one and
            # padded with IGNORE_INDEX, so the last position predicts nothing.
            # With Trainer's num_items_in_batch (the label count over all accumulated micro-batches), the
            # sum is divided by it instead of taking the mean, so gradient accumulation weighs every token once.
            if shift_labels is None:
                shift_labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
            shift_labels = shift_labels.to(logits.device)
            num_items = kwargs.get("num_items_in_batch")
            loss = F.cross_entropy(
                logits.float().view(-1, self.config.vocab_size),
                shift_labels.reshape(-1),
                ignore_index=IGNORE_INDEX,
                reduction="mean" if num_items is None else "sum",
            )
            if num_items is not None:
                loss = loss / (num_items.to(loss.device) if isinstance(num_items, Tensor) else num_items)
        return self._finish(CausalLMOutput(loss, logits, outputs.hidden_states, outputs.attentions), kwargs)


class BertForMaskedLM(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel
    output_embeddings = "cls.predictions.decoder"
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        if config.is_decoder:
            warn_user("BertForMaskedLM with is_decoder=True attends only to the left")
        self._add_base_model(attn_implementation)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(B, T, vocab) logits from the last hidden state: BERT's head is cls.predictions."""
        return self.cls(sequence_output)


class BertForNextSentencePrediction(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        self.cls = BertOnlyNSPHead(config)
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
    ) -> NextSentencePredictorOutput | tuple[Tensor, ...]:
        """Whether sentence B follows sentence A.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: as in
                BertModel.forward.
            labels: (B,), 0 where sentence B continues sentence A, 1 where it is random.
            **kwargs: BertModel.forward's other keywords (output_attentions, output_hidden_states, ...)
                and return_dict.

        Returns:
            NextSentencePredictorOutput: loss, logits (B, 2), hidden_states and attentions as
            BertModel.forward's; with return_dict=False the tuple of its non-None fields.
        """
        inputs = bert_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self._encode(**inputs, **kwargs)
        logits = self.cls(outputs.pooler_output)  # (B, 2)
        loss = F.cross_entropy(logits.view(-1, 2), labels.view(-1)) if labels is not None else None
        output = NextSentencePredictorOutput(loss, logits, outputs.hidden_states, outputs.attentions)
        return self._finish(output, kwargs)


class BertForSequenceClassification(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        self.num_labels = config.num_labels
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        add_dropout_classifier(self, config.num_labels)
        self.post_init()

    forward = sequence_classification_forward
    classify = pooled_classify


class BertForMultipleChoice(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        add_dropout_classifier(self, 1)  # one score per choice
        self.post_init()

    forward = multiple_choice_forward

    def choice_scores(self, outputs: BaseModelOutputWithPooling) -> Tensor:
        """(B * num_choices, 1) scores from the base model's outputs of every choice: BERT's read the pooler output."""
        return self.classifier(self.dropout(outputs.pooler_output))


class BertForTokenClassification(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as BertModel's.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        self.num_labels = config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, config.num_labels)
        self.post_init()

    forward = token_classification_forward


class BertForQuestionAnswering(BertPreTrainedModel, ModelWithHead):
    base_model_class = BertModel

    def __init__(self, config: BertConfig, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels must be 2: start, end).
            attn_implementation: as BertModel's.

        Raises:
            ValueError: config.num_labels is not 2.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    forward = question_answering_forward


# Every model class by name: what Auto* classes and the parity check build from a name.
MODEL_CLASSES: dict[str, type[BertPreTrainedModel]] = {
    cls.__name__: cls
    for cls in (
        BertModel,
        BertForPreTraining,
        BertLMHeadModel,
        BertForMaskedLM,
        BertForNextSentencePrediction,
        BertForSequenceClassification,
        BertForMultipleChoice,
        BertForTokenClassification,
        BertForQuestionAnswering,
    )
}
