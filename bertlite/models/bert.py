"""BERT as a module tree whose names and state_dict keys are transformers'.

Attribute names follow transformers/models/bert/modeling_bert.py so a Hugging Face
state_dict loads key for key. The eager attention keeps transformers' op order,
so in float32 it is bitwise equal to transformers' eager attention. The transformers-compatible
surface every model shares is models.modeling_utils.PreTrainedModel; the outputs are models.outputs.
About 700 lines: the whole tree in one file, as transformers' modeling_bert.py, with the hooks the other
families build on (embeddings, encoder and layer classes, the position bias).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.graph import save_on_cpu
from torch.utils.checkpoint import checkpoint

from bertlite.config import BertConfig, as_bert_config, bind_attention
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import (
    DEFAULT_ATTENTION,
    PACKED_ATTENTION,
    PACKED_BIASED_ATTENTION,
    check_attn_implementation,
    packed_first_token_attention,
    padded_attention,
)
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import BERT_ROLES, attention_of

# The `X as X` imports are names that moved out of this module (the forward keywords to inputs, the outputs,
# DUMMY_INPUTS to modeling_utils); they stay importable from here, where callers found them before.
from bertlite.models.inputs import IGNORED_FORWARD_KWARGS as IGNORED_FORWARD_KWARGS
from bertlite.models.inputs import NONE_ONLY_FORWARD_KWARGS as NONE_ONLY_FORWARD_KWARGS
from bertlite.models.inputs import (
    check_first_token_of,
    check_forward_kwargs,
    check_inputs,
    check_packed_inputs,
    recording_graph,
)
from bertlite.models.modeling_utils import DUMMY_INPUTS as DUMMY_INPUTS
from bertlite.models.modeling_utils import PreTrainedModel
from bertlite.models.outputs import TRANSFORMERS_OUTPUTS_MODULE as TRANSFORMERS_OUTPUTS_MODULE
from bertlite.models.outputs import BaseModelOutputWithPooling
from bertlite.models.outputs import ModelOutput as ModelOutput

# Relative position embeddings (transformers 4.x's position_embedding_type values).
RELATIVE_POSITION_EMBEDDINGS = ("relative_key", "relative_key_query")


def supports_packed(config: BertConfig) -> bool:
    """Whether the layers can run this model on a packed batch.

    They know padding masks, absolute positions and a shared bias by distance (JinaBERT's ALiBi, read from one
    grid's corner): relative position embeddings need each sequence's (T, T) distance grid, a decoder a causal
    mask. BertModel runs the others padded and re-packs the result.

    Args:
        config: the model's config.

    Returns:
        True for absolute or ALiBi positions in an encoder.
    """
    return config.position_embedding_type in ("absolute", "alibi") and not config.is_decoder


# --- modules -----------------------------------------------------------------


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # With relative positions the table exists (checkpoints carry it) but is not added, as in transformers 4.x.
        self.position_embedding_type = config.position_embedding_type
        # The position id of each sequence's first token on a packed batch (a family counts from elsewhere).
        self.first_position = 0
        # transformers keeps position_ids/token_type_ids as non-persistent buffers;
        # they are made on the fly here so a meta-device build has nothing to re-fill.

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        seq_length, device = inputs_embeds.shape[1], inputs_embeds.device
        if position_ids is None:
            position_ids = torch.arange(seq_length, device=device).unsqueeze(0)  # (1, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros(1, seq_length, dtype=torch.long, device=device)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        if self.position_embedding_type == "absolute":
            embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class BertSelfAttention(nn.Module):
    """Attention by name over the query, key and value Linears, padded or packed: the core every family's
    attention module is (a family's subclass renames the Linears with projection_names)."""

    # The attribute names of the query, key and value Linears (DistilBERT's: q_lin, k_lin, v_lin).
    projection_names: tuple[str, str, str] = ("query", "key", "value")

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.head_dim
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.scaling = self.attention_head_size**-0.5
        for name in self.projection_names:
            setattr(self, name, nn.Linear(config.hidden_size, self.all_head_size))
        # A module giving query|key|value in one call, installed by a module swap (layers.onednn.optimize
        # reads the three Linears above; quant.int8 replaces them); None: the three Linears, one by one.
        self.qkv: nn.Module | None = None
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.attn_implementation = check_attn_implementation(attn_implementation)
        self.position_embedding_type = config.position_embedding_type
        if self.position_embedding_type in RELATIVE_POSITION_EMBEDDINGS:
            # One vector per signed distance -(P-1)..P-1 between query and key (Shaw et al. 2018).
            self.max_position_embeddings = config.max_position_embeddings
            self.distance_embedding = nn.Embedding(2 * config.max_position_embeddings - 1, self.attention_head_size)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        position_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """hidden_states: (B, T, H) with an additive attention_bias, or packed (N, H) rows with their layout;
        first_token_of (packed): only these sequences' first-token queries, (R, H) context; position_bias:
        (1, nh, T, T) terms added to the scaled scores (MPNet's relative attention bias), T the padded
        length or the layout's max_length."""
        # Probabilities exist only on the eager path, so asking for them selects it.
        name = "eager" if output_attentions else self.attn_implementation
        dropout_p = self.dropout.p if self.training else 0.0
        if layout is not None:
            if self.position_embedding_type in RELATIVE_POSITION_EMBEDDINGS:
                raise ValueError("relative position embeddings need a padded batch (BertModel pads such models)")
            qkv = self.packed_qkv(hidden_states)  # (N, 3H)
            heads = self.num_attention_heads
            if first_token_of is not None:
                context = packed_first_token_attention(
                    qkv, layout, first_token_of, heads, self.scaling, dropout_p, position_bias
                )
                return context, None
            if position_bias is not None:
                return PACKED_BIASED_ATTENTION[name](qkv, layout, heads, self.scaling, dropout_p, position_bias)
            return PACKED_ATTENTION[name](qkv, layout, heads, self.scaling, dropout_p)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.attention_head_size)
        projections = self.projections(hidden_states)
        query, key, value = (p.view(hidden_shape).transpose(1, 2) for p in projections)  # (B, nh, T, hs)
        position_scores = self.relative_position_scores(query, key)
        context, probs = padded_attention(name)(
            query, key, value, attention_bias, self.scaling, dropout_p, position_scores, position_bias
        )
        context = context.reshape(*input_shape, -1).contiguous()  # (B, T, H)
        return context, probs

    def projections(self, hidden_states: Tensor) -> tuple[Tensor, ...]:
        """query, key and value of hidden_states (..., H), each (..., H) (a family may normalize them)."""
        if self.qkv is None:
            return tuple(getattr(self, name)(hidden_states) for name in self.projection_names)
        return self.qkv(hidden_states).split(self.all_head_size, dim=-1)

    def packed_qkv(self, hidden_states: Tensor) -> Tensor:
        """query|key|value of every row, (N, 3H)."""
        if self.qkv is not None:
            return self.qkv(hidden_states)
        return torch.cat([getattr(self, name)(hidden_states) for name in self.projection_names], dim=-1)

    def relative_position_scores(self, query: Tensor, key: Tensor) -> tuple[Tensor, ...]:
        """The unscaled relative-position terms of the attention scores, as transformers 4.x computed
        them: query . d(l - r) for relative_key, plus key . d(l - r) for relative_key_query. Empty
        for absolute positions. The distance is l - r whatever position_ids say, as in 4.x."""
        if self.position_embedding_type not in RELATIVE_POSITION_EMBEDDINGS:
            return ()
        query_length, key_length = query.shape[2], key.shape[2]
        positions_l = torch.arange(query_length, dtype=torch.long, device=query.device).view(-1, 1)
        positions_r = torch.arange(key_length, dtype=torch.long, device=query.device).view(1, -1)
        distance = positions_l - positions_r  # (T, T)
        positional = self.distance_embedding(distance + self.max_position_embeddings - 1)  # (T, T, hs)
        positional = positional.to(dtype=query.dtype)  # a half-precision model with a float32 table
        scores = (torch.einsum("bhld,lrd->bhlr", query, positional),)  # (B, nh, T, T)
        if self.position_embedding_type == "relative_key_query":
            scores += (torch.einsum("bhrd,lrd->bhlr", key, positional),)
        return scores


class _DenseAddNorm(nn.Module):
    """LayerNorm(dropout(dense(x)) + residual): the two places a layer writes back to the residual stream."""

    def __init__(self, in_features: int, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Set by the module swap that installs a dense taking forward(x, residual=) (layers.onednn.optimize,
        # quant.int8.quantize_int8): the residual is added inside its GEMM. Inference only: no dropout runs.
        self.fuses_residual = False

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        if self.fuses_residual and not self.training:
            return self.LayerNorm(self.dense(hidden_states, residual=input_tensor))
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertSelfOutput(_DenseAddNorm):
    def __init__(self, config: BertConfig) -> None:
        super().__init__(config.hidden_size, config)


class BertAttention(nn.Module):
    # A family whose attention adds to BERT's (JinaBERT's normed query and key) names its class here.
    self_attention_class: type[BertSelfAttention] = BertSelfAttention

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.self = self.self_attention_class(config, attn_implementation)
        self.output = BertSelfOutput(config)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        position_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """BertSelfAttention, then BertSelfOutput on the residual (of the rows kept, with first_token_of);
        position_bias: the encoder's shared bias by distance (JinaBERT's ALiBi), None for BERT."""
        context, probs = self.self(
            hidden_states, attention_bias, output_attentions, layout, first_token_of, position_bias
        )
        if first_token_of is not None:
            hidden_states = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        return self.output(context, hidden_states), probs


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that fuses it into the GEMM
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(_DenseAddNorm):
    def __init__(self, config: BertConfig) -> None:
        super().__init__(config.intermediate_size, config)


class BertLayer(nn.Module):
    # Where its parts are, for the module swaps (bertlite.layers.roles).
    roles = BERT_ROLES

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = BertAttention(config, attn_implementation)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        attention_output, probs = self.attention(
            hidden_states, attention_bias, output_attentions, layout, first_token_of
        )
        layer_output = self.output(self.intermediate(attention_output), attention_output)
        return layer_output, probs


class BertEncoder(nn.Module):
    layer_class: type[nn.Module] = BertLayer  # a family's layer (bertlite.models.mpnet)

    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        layers = [self.layer_class(config, attn_implementation) for _ in range(config.num_hidden_layers)]
        self.layer = nn.ModuleList(layers)
        # Set by BertPreTrainedModel.gradient_checkpointing_enable(), as in transformers.
        self.gradient_checkpointing = False
        self.checkpoint_kwargs: dict[str, Any] = {"use_reentrant": False}
        self.checkpoint_every_n_layers = 1  # layer i is recomputed when i % n == 0
        self.checkpoint_offload = False  # keep the saved layer inputs in host memory

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, ...] | None, tuple[Tensor, ...] | None]:
        """first_token_of (packed): the last layer computes only these sequences' first-token rows."""
        all_hidden_states = [hidden_states] if output_hidden_states else None
        all_attentions = [] if output_attentions else None
        last = len(self.layer) - 1
        position_bias = self.position_bias(hidden_states, layout)
        extra = () if position_bias is None else (position_bias,)  # BERT's layers take no position bias
        for i, layer_module in enumerate(self.layer):
            rows = first_token_of if i == last else None
            if self.gradient_checkpointing and self.training and i % self.checkpoint_every_n_layers == 0:
                # Keep only each layer's input; backward re-runs the layer (with the same dropout masks).
                with save_on_cpu(pin_memory=torch.cuda.is_available()) if self.checkpoint_offload else nullcontext():
                    hidden_states, probs = checkpoint(
                        layer_module,
                        hidden_states,
                        attention_bias,
                        output_attentions,
                        layout,
                        rows,
                        *extra,
                        **self.checkpoint_kwargs,
                    )
            else:
                hidden_states, probs = layer_module(
                    hidden_states, attention_bias, output_attentions, layout, rows, *extra
                )
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
            if all_attentions is not None:
                all_attentions.append(probs)
        return (
            hidden_states,
            tuple(all_hidden_states) if all_hidden_states is not None else None,
            tuple(all_attentions) if all_attentions is not None else None,
        )

    def position_bias(self, hidden_states: Tensor, layout: PackedLayout | None) -> Tensor | None:
        """The relative position bias every layer adds to its attention scores: None, BERT has none (a
        family's encoder computes its own, bertlite.models.mpnet).

        Args:
            hidden_states: the embeddings, (B, T, H) or packed (N, H).
            layout: the packed batch's layout; None for a padded batch.

        Returns:
            None here; a family's (1, nh, T, T).
        """
        return None


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: Tensor, layout: PackedLayout | None = None) -> Tensor:
        first = hidden_states[:, 0] if layout is None else hidden_states[layout.starts]  # the [CLS] token
        return self.activation(self.dense(first))


# --- models ------------------------------------------------------------------


class BertPreTrainedModel(PreTrainedModel):
    """The base of every BERT model: transformers' PreTrainedModel members (PreTrainedModel) on BERT's config,
    weight init and module tree."""

    config_class = BertConfig
    base_model_prefix = "bert"
    _checkpointed_module_types = (BertEncoder,)
    _attention_module_types = (BertSelfAttention,)
    _as_config = staticmethod(as_bert_config)  # a transformers BertConfig becomes bertlite's

    def __init__(self, config: BertConfig) -> None:
        """Keep the config; subclasses build the modules.

        Args:
            config: a bertlite.BertConfig, or a transformers BertConfig (its values are copied into a
                bertlite one); add_cross_attention is not supported.

        Raises:
            TypeError: `config` is neither.
            ValueError: config.add_cross_attention is set, or a value bertlite does not run.
        """
        super().__init__(config)
        if self.config.add_cross_attention:
            raise ValueError("add_cross_attention=True (BERT as a seq2seq decoder) is not supported by bertlite")

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # transformers' scheme, so a from-scratch model starts from the same distribution.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(mean=0.0, std=std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif hasattr(module, "decoder") and isinstance(module._parameters.get("bias"), nn.Parameter):
            module.bias.zero_()  # a language-model head's bare bias (BertLMPredictionHead, RobertaLMHead)


def _check_layout_kwargs(
    packed: bool,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
    first_token_of: Tensor | None,
) -> None:
    """Refuse the keywords of BertModel.forward that the other layout takes.

    Args:
        packed: whether the batch is packed (lengths= or layout= given).
        attention_mask, position_ids, inputs_embeds: padded only; a packed batch's layout says them.
        first_token_of: packed only.

    Raises:
        ValueError: naming the keyword that does not go with this layout.
    """
    if not packed:
        if first_token_of is not None:
            raise ValueError("first_token_of takes a packed batch (lengths= or layout=)")
        return
    for name, value in (("attention_mask", attention_mask), ("position_ids", position_ids)):
        if value is not None:
            raise ValueError(f"{name} is not taken with a packed batch: the layout (lengths=) says it")
    if inputs_embeds is not None:
        raise ValueError("a packed batch takes input_ids (total_tokens,), not inputs_embeds")


class BertModel(BertPreTrainedModel):
    """The BERT encoder: embeddings, the layers and an optional pooler, with transformers' keys."""

    embeddings_class: type[nn.Module] = BertEmbeddings  # a family's embeddings (bertlite.models.roberta)
    encoder_class: type[BertEncoder] = BertEncoder  # a family's encoder (bertlite.models.mpnet)

    def __init__(
        self,
        config: BertConfig,
        add_pooling_layer: bool = True,
        attn_implementation: str | None = None,
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model (config.bind_attention), so
                config._attn_implementation reads and sets the model's attention, as in transformers.
            add_pooling_layer: build the BertPooler (pooler_output); False leaves it out (pooler is None).
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation (set before building, as transformers' code does), else "sdpa".

        Raises:
            ValueError: an unknown attention name.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        if attn_implementation is None:
            attn_implementation = config._attn_implementation or DEFAULT_ATTENTION
        check_attn_implementation(attn_implementation)  # before any layer is built
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config, attn_implementation)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.init_weights()
        bind_attention(config, self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # A deep copy or an unpickled model has a copy of the config, which a weak reference does not reach.
        bind_attention(self.config, self)

    @property
    def attn_implementation(self) -> str:
        """The attention implementation the layers run ("eager" for a model without layers)."""
        return attention_of(self.encoder.layer[0]).attn_implementation if len(self.encoder.layer) else "eager"

    def get_input_embeddings(self) -> nn.Embedding:
        """The word embeddings."""
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """Replace the word embeddings with `value`."""
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        use_cache: bool | None = None,
        lengths: Tensor | None = None,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Tensor, ...]:
        """Run a padded batch, as in transformers, or a packed one; both run the same modules.

        A packed batch: input_ids (N,) holding the sequences one after another, and their lengths (B,)
        or a PackedLayout; see bertlite.layers.packing.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens, 0 for padding; None: nothing masked. Not packed.
            token_type_ids: (B, T), or (N,) packed; None: all 0.
            position_ids: (B, T); None: 0..T-1. Not with a packed batch.
            inputs_embeds: (B, T, H) instead of input_ids (padded only).
            output_attentions: also return each layer's attention probabilities; None: the config's.
            output_hidden_states: also return the embedding output and each layer's; None: the config's.
            return_dict: return a BaseModelOutputWithPooling; False: a tuple of its non-None fields; None: the config's.
            use_cache: ignored by an encoder; True is refused for a decoder (no KV cache).
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; the last layer then computes only these
                sequences' first-token ([CLS]) rows, all a [CLS] or pooler head reads, so last_hidden_state
                and pooler_output are (R, H), row r of sequence first_token_of[r]. None: every row.
            **kwargs: what transformers' forward also takes and bertlite ignores (tokenizer extras such
                as special_tokens_mask, Trainer's num_items_in_batch; head_mask=None and other v4
                keywords as None); anything else is a TypeError naming it.

        Returns:
            last_hidden_state (B, T, H), pooler_output (B, H) (None without a pooler), hidden_states
            (num_hidden_layers + 1 tensors like last_hidden_state) and attentions ((B, nh, T, T) per
            layer) when asked. Packed: last_hidden_state and hidden_states are (N, H), one row per
            real token; pooler_output (B, H).

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does not take.
            TypeError: an unknown keyword.
            NotImplementedError: use_cache=True for a decoder, or a keyword accepted only as None given a value.
        """
        self._check_unsupported_kwargs(use_cache, kwargs)
        packed = lengths is not None or layout is not None
        _check_layout_kwargs(packed, attention_mask, position_ids, inputs_embeds, first_token_of)
        flags = self._output_flags(output_attentions, output_hidden_states)
        if packed:
            out = self._forward_packed(input_ids, token_type_ids, lengths, layout, *flags, first_token_of)
        else:
            out = self._forward_padded(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, *flags)
        return out if (self.config.return_dict if return_dict is None else return_dict) else out.to_tuple()

    def _check_unsupported_kwargs(self, use_cache: bool | None, kwargs: dict[str, Any]) -> None:
        """Refuse what transformers' forward takes and an encoder cannot run: see forward's Raises."""
        check_forward_kwargs(type(self).__name__, kwargs)
        if use_cache and self.config.is_decoder:
            raise NotImplementedError("use_cache=True (a KV cache for generation) is not supported by bertlite")

    def _output_flags(self, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
        """(output_attentions, output_hidden_states), each None replaced by the config's value."""
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        return output_attentions, output_hidden_states

    def _embed(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
        inputs_embeds: Tensor | None,
    ) -> Tensor:
        """What the first layer reads, padded (B, T, H) or packed (N, H): the embeddings' output (a family
        may project it, as ELECTRA's embeddings_project)."""
        return self.embeddings(
            input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds
        )

    def _forward_padded(
        self,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
        inputs_embeds: Tensor | None,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> BaseModelOutputWithPooling:
        check_inputs(self.config, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids)
        embedding_output = self._embed(input_ids, token_type_ids, position_ids, inputs_embeds)
        attention_bias = self.get_attention_bias(attention_mask, embedding_output)
        sequence_output, hidden_states, attentions = self.encoder(
            embedding_output, attention_bias, output_attentions, output_hidden_states
        )
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(sequence_output, pooled_output, hidden_states, attentions)

    def _forward_packed(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        lengths: Tensor | None,
        layout: PackedLayout | None,
        output_attentions: bool,
        output_hidden_states: bool,
        first_token_of: Tensor | None = None,
    ) -> BaseModelOutputWithPooling:
        if input_ids is None:
            raise ValueError("a packed batch needs input_ids of shape (total_tokens,)")
        if lengths is not None and layout is not None:
            raise ValueError("give lengths= or layout=, not both")
        lengths = layout.lengths if layout is not None else torch.as_tensor(lengths, device=input_ids.device)
        check_packed_inputs(self.config, input_ids, lengths, token_type_ids)
        if layout is None:
            layout = PackedLayout.from_lengths(lengths, self.embeddings.word_embeddings.weight.dtype)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if first_token_of is not None:
            check_first_token_of(first_token_of, layout.batch_size, output_attentions)
        if not supports_packed(self.config):
            out = self._forward_packed_as_padded(
                input_ids, token_type_ids, layout, output_attentions, output_hidden_states
            )
            if first_token_of is None:
                return out
            # The padded forward ran every row; keep those asked for.
            pooled = out.pooler_output[first_token_of] if out.pooler_output is not None else None
            sequence_output = out.last_hidden_state[layout.starts[first_token_of]]
            return BaseModelOutputWithPooling(sequence_output, pooled, out.hidden_states, out.attentions)
        positions = (
            layout.positions + self.embeddings.first_position if self.embeddings.first_position else layout.positions
        )
        embedding_output = self._embed(input_ids, token_type_ids, positions, None)
        sequence_output, hidden_states, attentions = self.encoder(
            embedding_output, None, output_attentions, output_hidden_states, layout, first_token_of
        )
        pooled_output = None
        if self.pooler is not None and first_token_of is not None:
            pooled_output = self.pooler(sequence_output[:, None])  # the rows left are first tokens: (R, 1, H)
        elif self.pooler is not None:
            pooled_output = self.pooler(sequence_output, layout)
        return BaseModelOutputWithPooling(sequence_output, pooled_output, hidden_states, attentions)

    def _forward_packed_as_padded(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor,
        layout: PackedLayout,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> BaseModelOutputWithPooling:
        """A packed batch through the padded forward, for models the layers cannot run packed
        (supports_packed): same result, without the speed-up."""
        out = self._forward_padded(
            layout.scatter_to_grid(input_ids),
            layout.key_mask.long(),
            layout.scatter_to_grid(token_type_ids),
            None,
            None,
            output_attentions,
            output_hidden_states,
        )
        hidden_states = None
        if out.hidden_states is not None:
            hidden_states = tuple(layout.gather_from_grid(h) for h in out.hidden_states)
        sequence_output = layout.gather_from_grid(out.last_hidden_state)
        return BaseModelOutputWithPooling(sequence_output, out.pooler_output, hidden_states, out.attentions)

    def get_attention_bias(self, attention_mask: Tensor | None, embeddings: Tensor) -> Tensor | None:
        """Build the additive attention bias: 0 where a key is attended, dtype-min where it is not.

        While a graph is recorded (jit.trace, export, compile) a given mask is always applied:
        whether it masks anything depends on its values, and the graph must hold for any mask.
        (check_inputs has checked the mask's shape.)

        Args:
            attention_mask: (B, T), 1 for real tokens; None: nothing masked (a decoder still gets its
                causal mask).
            embeddings: the embedding output (B, T, H), for the dtype, device and T.

        Returns:
            (B, 1, 1, T), or for a decoder (B, 1, T, T) ((1, 1, T, T) without a mask), in the
            embeddings' dtype. In eager mode None
            when nothing is masked, which lets SDPA pick its fastest kernel.
        """
        seq_length = embeddings.shape[1]
        keep = None
        if attention_mask is not None and (recording_graph() or not bool(attention_mask.all())):
            keep = attention_mask.to(device=embeddings.device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, T)
        if self.config.is_decoder:
            causal = torch.ones(seq_length, seq_length, dtype=torch.bool, device=embeddings.device).tril()
            keep = causal[None, None] if keep is None else keep & causal  # (B, 1, T, T)
        if keep is None:
            return None
        bias = torch.zeros(keep.shape, dtype=embeddings.dtype, device=embeddings.device)
        return bias.masked_fill_(~keep, torch.finfo(embeddings.dtype).min)
