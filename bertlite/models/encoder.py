"""The encoder core of the families with a module tree of their own: GTE, NomicBERT, EuroBERT, DeBERTa-v2, ModernBERT.

EncoderPreTrainedModel holds what those families' PreTrainedModel and base model write alike: transformers' normal
init, the attention name read from the first layer, the input-embedding accessors, the base model's gradient
checkpointing fields and attention binding, the padded-or-packed routing of a forward with its packed checks, and
the layer loop (hidden states and attentions recorded as transformers records them, checkpointing per layer).
Each family keeps its embeddings, layer, rotary or relative positions and the names its checkpoints use, told to
the core by class attributes (`_layers_path`, `_input_embeddings_path`, ...). The rotary families (GTE, NomicBERT,
EuroBERT) also share the whole forward through `_rotary_forward`. PooledSequenceClassifier and
DropoutTokenClassifier are the classifier heads GTE and NomicBERT write alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from bertlite.config import bind_attention
from bertlite.layers.attention import DEFAULT_ATTENTION, check_attn_implementation
from bertlite.layers.packing import PackedLayout
from bertlite.models.heads import (
    add_dropout_classifier,
    pooled_classify,
    sequence_classification_forward,
    token_classification_forward,
)
from bertlite.models.inputs import check_first_token_of, check_inputs, check_packed_inputs, recording_graph
from bertlite.models.modeling_utils import ModelWithHead, PreTrainedModel
from bertlite.models.outputs import BaseModelOutputWithPooling

LayerOutputs = tuple[Tensor, tuple[Tensor, ...] | None, tuple[Tensor, ...] | None]


def padding_bias(attention_mask: Tensor | None, embeddings: Tensor) -> Tensor | None:
    """The additive bias of a padded batch: dtype-min on padding.

    Args:
        attention_mask: (B, T), 1 for real tokens; None: nothing masked.
        embeddings: (B, T, H) the embedding output, whose dtype and device the bias takes.

    Returns:
        (B, 1, 1, T), or None when nothing is masked (and no graph is being recorded).
    """
    if attention_mask is None or not (recording_graph() or not bool(attention_mask.all())):
        return None
    keep = attention_mask.to(device=embeddings.device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, T)
    bias = torch.zeros(keep.shape, dtype=embeddings.dtype, device=embeddings.device)
    return bias.masked_fill_(~keep, torch.finfo(embeddings.dtype).min)


class EncoderPreTrainedModel(PreTrainedModel):
    """The shared core of a family's PreTrainedModel and base model; a family names its parts in class attributes."""

    # Where the base model keeps its layers, and the attention module inside one layer.
    _layers_path: ClassVar[str] = "encoder.layer"
    _attention_path: ClassVar[str] = "attention"
    # Where the base model keeps its word embeddings.
    _input_embeddings_path: ClassVar[str] = "embeddings.word_embeddings"
    # The norms transformers' init sets to 1 (and their bias, if any, to 0).
    _norm_types: ClassVar[tuple[type[nn.Module], ...]] = (nn.LayerNorm,)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """transformers' scheme: normals at initializer_range (a padding row zero), norms at 1 and 0, biases 0.

        Args:
            module: one module of the model (init_weights applies this to every module).
        """
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(mean=0.0, std=self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.zero_()
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, self._norm_types):
            module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()

    @property
    def attn_implementation(self) -> str:
        """The attention implementation the layers run."""
        layers = self.base_model.get_submodule(self._layers_path)
        return layers[0].get_submodule(self._attention_path).attn_implementation if len(layers) else "eager"

    def get_input_embeddings(self) -> nn.Embedding:
        """The word embeddings."""
        return self.base_model.get_submodule(self._input_embeddings_path)

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """Replace the word embeddings with `value`."""
        owner, _, name = self._input_embeddings_path.rpartition(".")
        setattr(self.base_model.get_submodule(owner), name, value)

    # --- the base model ---------------------------------------------------------

    def _attention_name(self, attn_implementation: str | None) -> str:
        """The attention the base model builds its layers with.

        Args:
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation, else "sdpa".

        Returns:
            The checked name.

        Raises:
            ValueError: an unknown attention name.
        """
        if attn_implementation is None:
            attn_implementation = self.config._attn_implementation or DEFAULT_ATTENTION
        check_attn_implementation(attn_implementation)
        return attn_implementation

    def _finish_base_model(self) -> None:
        """Set the gradient checkpointing fields, initialise the weights and bind the config's attention to the
        base model, as the last step of its __init__."""
        self.gradient_checkpointing = False
        self.checkpoint_kwargs: dict[str, Any] = {"use_reentrant": False}
        self.checkpoint_every_n_layers = 1
        self.checkpoint_offload = False
        self.init_weights()
        bind_attention(self.config, self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if isinstance(self, self._checkpointed_module_types):  # a base model binds its copy's config, a head does not
            bind_attention(self.config, self)

    def _output_flags(self, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
        """output_attentions and output_hidden_states, the config's where None."""
        cfg = self.config
        return (
            cfg.output_attentions if output_attentions is None else output_attentions,
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states,
        )

    def _returned(self, output: BaseModelOutputWithPooling, return_dict: bool | None) -> Any:
        """`output`, or its tuple when return_dict (else config.return_dict) is False."""
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()

    @staticmethod
    def _is_packed(
        attention_mask: Tensor | None,
        position_ids: Tensor | None,
        inputs_embeds: Tensor | None,
        lengths: Tensor | None,
        layout: PackedLayout | None,
        first_token_of: Tensor | None,
    ) -> bool:
        """Whether a forward's inputs are a packed batch (lengths= or layout=), refusing what that route does not take.

        Raises:
            ValueError: attention_mask, position_ids or inputs_embeds with a packed batch; first_token_of without one.
        """
        if lengths is None and layout is None:
            if first_token_of is not None:
                raise ValueError("first_token_of takes a packed batch (lengths= or layout=)")
            return False
        for name, value in (("attention_mask", attention_mask), ("position_ids", position_ids)):
            if value is not None:
                raise ValueError(f"{name} is not taken with a packed batch: the layout (lengths=) says it")
        if inputs_embeds is not None:
            raise ValueError("a packed batch takes input_ids (total_tokens,), not inputs_embeds")
        return True

    def _packed_layout(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        lengths: Tensor | None,
        layout: PackedLayout | None,
        first_token_of: Tensor | None,
        output_attentions: bool,
    ) -> PackedLayout:
        """A packed batch's layout, its inputs checked.

        Args:
            input_ids: (N,) the packed ids.
            token_type_ids: (N,) or None.
            lengths: (B,) lengths, or None with layout.
            layout: a PackedLayout, or None with lengths.
            first_token_of: (R,) sequence numbers or None.
            output_attentions: whether the forward returns attentions (first_token_of refuses them).

        Returns:
            The layout given, or one built from lengths in the word embeddings' dtype.

        Raises:
            ValueError: no input_ids, both lengths and layout, or inputs out of range.
        """
        if input_ids is None:
            raise ValueError("a packed batch needs input_ids of shape (total_tokens,)")
        if lengths is not None and layout is not None:
            raise ValueError("give lengths= or layout=, not both")
        lengths = layout.lengths if layout is not None else torch.as_tensor(lengths, device=input_ids.device)
        check_packed_inputs(self.config, input_ids, lengths, token_type_ids)
        if layout is None:
            layout = PackedLayout.from_lengths(lengths, self.get_input_embeddings().weight.dtype)
        if first_token_of is not None:
            check_first_token_of(first_token_of, layout.batch_size, output_attentions)
        return layout

    def _layer_loop(
        self,
        hidden_states: Tensor,
        layers: Sequence[nn.Module],
        layer_args: Callable[[int, nn.Module], tuple[Any, ...]],
        output_attentions: bool,
        output_hidden_states: bool,
        final_norm: nn.Module | None = None,
    ) -> LayerOutputs:
        """Run the layers, checkpointing each one gradient checkpointing picks.

        Args:
            hidden_states: the embedding output.
            layers: the layers, each returning (hidden_states, attention probabilities or None).
            layer_args: (layer number, layer) -> the layer's arguments after hidden_states.
            output_attentions: record each layer's attention probabilities.
            output_hidden_states: record the embeddings, then each layer's output.
            final_norm: a norm after the last layer; the last hidden state recorded is then its output, as
                transformers records it.

        Returns:
            (last_hidden_state, hidden_states or None, attentions or None).
        """
        all_hidden = [hidden_states] if output_hidden_states else None
        all_attentions = [] if output_attentions else None
        for i, layer in enumerate(layers):
            args = (hidden_states, *layer_args(i, layer))
            if self.gradient_checkpointing and self.training and i % self.checkpoint_every_n_layers == 0:
                hidden_states, probs = checkpoint(layer, *args, **self.checkpoint_kwargs)
            else:
                hidden_states, probs = layer(*args)
            if all_hidden is not None:
                all_hidden.append(hidden_states)
            if all_attentions is not None:
                all_attentions.append(probs)
        if final_norm is not None:
            hidden_states = final_norm(hidden_states)
            if all_hidden is not None:
                all_hidden[-1] = hidden_states
        return (
            hidden_states,
            None if all_hidden is None else tuple(all_hidden),
            None if all_attentions is None else tuple(all_attentions),
        )

    # --- the rotary families' forward ----------------------------------------------

    def _embed(self, input_ids: Tensor | None, token_type_ids: Tensor | None, inputs_embeds: Tensor | None) -> Tensor:
        """The embedding output a rotary family's layers start from; each such family sets it.

        Raises:
            NotImplementedError: always here.
        """
        raise NotImplementedError(f"{type(self).__name__} has no _embed; its family sets one")

    def _rotary_forward(
        self,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
        inputs_embeds: Tensor | None,
        output_attentions: bool | None,
        output_hidden_states: bool | None,
        lengths: Tensor | None,
        layout: PackedLayout | None,
        first_token_of: Tensor | None,
        final_norm: nn.Module | None = None,
        adapter_mask: Tensor | None = None,
    ) -> BaseModelOutputWithPooling:
        """A rotary family's forward, padded or packed: `_embed`, `rotary_emb`, the layers, the optional pooler.

        Args:
            input_ids ... first_token_of: as the family's forward takes them.
            final_norm: the family's norm after the last layer, if it has one.
            adapter_mask: (B,) each sequence's task adapter, for a family with them (layers.lora; -1: none); its
                rows' tasks then reach `_embed`, each layer and the pooler as one more argument.

        Returns:
            The output; pooler_output the pooler's on each sequence's first token, None without a pooler.

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does not take.
        """
        output_attentions, output_hidden_states = self._output_flags(output_attentions, output_hidden_states)
        layers = self.get_submodule(self._layers_path)
        if self._is_packed(attention_mask, position_ids, inputs_embeds, lengths, layout, first_token_of):
            layout = self._packed_layout(input_ids, token_type_ids, lengths, layout, first_token_of, output_attentions)
            rows = () if adapter_mask is None else (adapter_mask.repeat_interleave(layout.lengths),)  # each token's
            hidden_states = self._embed(input_ids, token_type_ids, None, *rows)
            position_ids, bias = layout.positions, None
        else:
            check_inputs(self.config, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids)
            rows = () if adapter_mask is None else (adapter_mask[:, None],)  # (B, 1): each sequence's task
            hidden_states = self._embed(input_ids, token_type_ids, inputs_embeds, *rows)
            if position_ids is None:
                position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
            elif position_ids.dim() == 1:
                position_ids = position_ids.unsqueeze(0)  # (1, T)
            bias = padding_bias(attention_mask, hidden_states)
        rotary = self.rotary_emb(hidden_states, position_ids)
        last = len(layers) - 1

        def layer_args(i: int, layer: nn.Module) -> tuple[Any, ...]:
            # first_token_of: the last layer computes only those sequences' first-token rows.
            return rotary, bias, output_attentions, layout, first_token_of if i == last else None, *rows

        out = self._layer_loop(hidden_states, layers, layer_args, output_attentions, output_hidden_states, final_norm)
        pooled = None
        if self.pooler is not None:  # first_token_of: the rows left are first tokens
            first = out[0][:, 0] if layout is None else out[0] if first_token_of is not None else out[0][layout.starts]
            pooled_rows = (
                ()
                if adapter_mask is None
                else (adapter_mask if first_token_of is None else adapter_mask[first_token_of],)
            )
            pooled = self.pooler(first, *pooled_rows)
        return BaseModelOutputWithPooling(out[0], pooled, *out[1:])


# --- the classifier heads the families write alike -------------------------------------


class PooledSequenceClassifier(ModelWithHead):
    """A family's ForSequenceClassification that reads its base model's pooler: `dropout` and `classifier` on the
    pooler output, as transformers' GTE and NomicBERT heads run them. A family's class subclasses its own
    PreTrainedModel and this, and names its base_model_class."""

    def __init__(self, config: Any, attn_implementation: str | None = None) -> None:
        """Build the model (with its pooler) and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as the base model's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation, add_pooling_layer=True)
        add_dropout_classifier(self, self.config.num_labels)
        self.post_init()

    forward = sequence_classification_forward

    classify = pooled_classify


class DropoutTokenClassifier(ModelWithHead):
    """A family's ForTokenClassification: `dropout` and `classifier` on every token's hidden state. A family's class
    subclasses its own PreTrainedModel and this, and names its base_model_class."""

    def __init__(self, config: Any, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as the base model's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        add_dropout_classifier(self, self.config.num_labels)
        self.post_init()

    forward = token_classification_forward
