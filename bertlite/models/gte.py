"""GTE: transformers' GteModel on the keys its checkpoints hold, padded and packed.

GTE (Alibaba's gte-*-v1.5 and gte-multilingual) is BERT's post-norm layer with rotary positions instead of
position embeddings, attention with q_proj, k_proj, v_proj and o_proj, a gated feed-forward (`mlp.down_proj` of
act(gate_proj(x)) * up_proj(x)) and LayerNorms `attn_ln` and `mlp_ln`; token type embeddings are optional. The
checkpoints (transformers 5 saves its native `gte` so too) fuse query|key|value as `attention.qkv_proj` and up|gate
as `mlp.up_gate_proj`; the module tree holds them apart, as transformers' does (so PEFT finds q_proj and v_proj),
and the load splits them and the save fuses them back (checkpoint.remap's FUSED_LINEARS); the other names are the
checkpoints'. Attention runs the shared kernels (layers.attention) padded or on PackedLayout's rows; the rotary
positions are layers.rotary's. The layer declares its parts (LayerRoles: q/k/v, whose one GEMM the module swaps
install in the attention's `qkv` slot, gate_proj the gated intermediate with up_proj, o_proj and down_proj taking
the residual add), so the CPU's oneDNN Linears and int8 swap in as for BERT. The heads are in models.gte_heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config.bert import as_bert_config
from bertlite.config.gte import GteConfig
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import (
    DEFAULT_ATTENTION,
    PACKED_ATTENTION,
    check_attn_implementation,
    packed_first_token_attention,
    padded_attention,
)
from bertlite.layers.lora import with_tasks
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.layers.rotary import apply_rotary, rotate_query_key
from bertlite.models.encoder import EncoderPreTrainedModel
from bertlite.models.inputs import check_forward_kwargs
from bertlite.models.outputs import BaseModelOutputWithPooling


def _as_config(config: Any) -> GteConfig:
    """A bertlite GteConfig for a bertlite or transformers config."""
    return as_bert_config(config, GteConfig)


# --- modules -----------------------------------------------------------------


class GteEmbeddings(nn.Module):
    """transformers' GteEmbeddings: word and (when type_vocab_size > 0) token type embeddings, LayerNorm, dropout."""

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size else None
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """(B, T) or packed (N,) ids (or inputs_embeds) to (..., H); token_type_ids None: zeros."""
        embeddings = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros(embeddings.shape[:-1], dtype=torch.long, device=embeddings.device)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


class GteRotaryEmbedding(nn.Module):
    """The rotary cos and sin of each position (rope_parameters' rope_theta), as transformers' default rope, or
    with the original layout's fixed-NTK scaling (rope_type "ntk", factor f): base theta * f and every inverse
    frequency divided by f ** (2 / head_dim), as its NTKScalingRotaryEmbedding computes them.

    The inverse frequencies are computed on the host at each call (head_dim / 2 numbers), so a model built on
    the meta device has no buffer to re-fill.
    """

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.theta = config.rope_theta
        self.ntk_factor = config.rope_ntk_factor

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin, (..., head_dim) in x's dtype, for positions (B, T) or packed (N,)."""
        dim = self.head_dim
        inv_freq = 1.0 / ((self.theta * self.ntk_factor) ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        if self.ntk_factor != 1.0:
            inv_freq = inv_freq / self.ntk_factor ** (2 / dim)
        freqs = position_ids[..., None].float() * inv_freq.to(device=x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class GteAttention(nn.Module):
    """transformers' GteAttention: q_proj, k_proj, v_proj, rotary positions, attention by name, o_proj."""

    def __init__(self, config: GteConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self._build_projections(config)
        self.attention_dropout = config.attention_probs_dropout_prob
        self.attn_implementation = check_attn_implementation(attn_implementation)
        # Set by the module swap that installs an o_proj taking forward(x, residual=) (layers.onednn.optimize,
        # quant.int8.quantize_int8): the layer's residual add then runs inside its GEMM. Inference only.
        self.fuses_residual = False

    def _build_projections(self, config: GteConfig) -> None:
        """The Linears, transformers' q_proj, k_proj, v_proj and o_proj, and the slot for q|k|v in one GEMM."""
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.o_proj = nn.Linear(hidden, hidden)
        self.qkv: nn.Module | None = None  # q|k|v in one GEMM, installed by the module swaps (roles' qkv slot)

    def _qkv(self, hidden_states: Tensor, adapter: Tensor | None) -> Tensor:
        """(..., 3H) query|key|value; adapter: each row's task (a family with task adapters)."""
        if self.qkv is not None:
            return self.qkv(hidden_states)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        return torch.cat([with_tasks(linear, hidden_states, adapter) for linear in projections], dim=-1)

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        residual: Tensor | None = None,
        adapter: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """hidden_states (B, T, H) with an additive attention_bias (B, 1, 1, T), or packed (N, H) rows with their
        layout; first_token_of (packed): only these sequences' first-token queries, (R, H) out; residual: added
        inside o_proj (fuses_residual, inference); adapter: each row's task ((B, 1) or (N,); layers.lora)."""
        name = "eager" if output_attentions else self.attn_implementation
        dropout_p = self.attention_dropout if self.training else 0.0
        cos, sin = position_embeddings
        qkv = self._qkv(hidden_states, adapter)
        out_adapter = adapter
        if adapter is not None and first_token_of is not None:
            out_adapter = adapter[layout.starts[first_token_of]]  # the tasks of the rows kept
        if layout is not None:
            qkv = rotate_query_key(qkv, 2 * self.num_heads, self.head_dim, cos, sin)  # (N, 3H)
            args = (qkv, layout, self.num_heads, self.scaling, dropout_p)
            if first_token_of is not None:
                context, probs = packed_first_token_attention(*args[:2], first_token_of, *args[2:]), None
            else:
                context, probs = PACKED_ATTENTION[name](*args)
            return self._out(context, residual, out_adapter), probs
        input_shape = hidden_states.shape[:-1]
        query, key, value = qkv.view(*input_shape, 3, -1, self.head_dim).unbind(dim=-3)
        query, key, value = (t.transpose(1, 2) for t in (query, key, value))  # (B, nh, T, hs)
        query = apply_rotary(query, cos[:, None], sin[:, None])
        key = apply_rotary(key, cos[:, None], sin[:, None])
        context, probs = padded_attention(name)(query, key, value, attention_bias, self.scaling, dropout_p)
        context = context.reshape(*input_shape, -1).contiguous()  # (B, T, H)
        return self._out(context, residual, out_adapter), probs

    def _out(self, context: Tensor, residual: Tensor | None, adapter: Tensor | None = None) -> Tensor:
        """o_proj on the context, with the residual added in its GEMM when given (fuses_residual), or each row's
        task adapter."""
        if residual is not None:
            return self.o_proj(context, residual=residual)
        return with_tasks(self.o_proj, context, adapter)


class GteMLP(nn.Module):
    """transformers' GteMLP: down_proj(dropout(act(gate_proj(x)) * up_proj(x)))."""

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that restores `act_fn`
        self.act_fn = ACT2FN[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size)
        self.fuses_residual = False  # as GteAttention's, for down_proj
        self.gated_product: nn.Module | None = None  # act(gate) * up in one module, set by layers.onednn.optimize

    def forward(self, hidden_states: Tensor, residual: Tensor | None = None, adapter: Tensor | None = None) -> Tensor:
        """(..., H) -> (..., H); residual (fuses_residual, inference): added inside down_proj's GEMM; adapter: each
        row's task (layers.lora)."""
        if self.gated_product is not None and adapter is None:
            gated = self.gated_product(hidden_states)
        else:
            gate = with_tasks(self.gate_proj, hidden_states, adapter)
            gated = self.act_fn(gate) * with_tasks(self.up_proj, hidden_states, adapter)
        if residual is not None:
            return self.down_proj(gated, residual=residual)
        return with_tasks(self.down_proj, self.dropout(gated), adapter)


class GteLayer(nn.Module):
    """GTE's post-norm layer: attn_ln(x + attention(x)), then mlp_ln(x + mlp(x))."""

    # Where its parts are, for the module swaps (bertlite.layers.roles).
    roles = LayerRoles(
        attention="attention",
        query="attention.q_proj",
        key="attention.k_proj",
        value="attention.v_proj",
        attention_output="attention.o_proj",
        intermediate="mlp.gate_proj",
        activation="mlp.act_fn",
        output="mlp.down_proj",
        gated=True,
        up="mlp.up_proj",
        residual_owners={"attention_output": "attention", "output": "mlp"},
    )

    def __init__(self, config: GteConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = GteAttention(config, attn_implementation)
        self.attn_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = GteMLP(config)
        self.mlp_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        adapter: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """first_token_of (packed): only these sequences' first-token rows come out, (R, H); adapter: each row's
        task ((B, 1) or (N,); layers.lora)."""
        residual, out_adapter = hidden_states, adapter
        if first_token_of is not None:
            residual = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
            out_adapter = None if adapter is None else adapter[layout.starts[first_token_of]]
        fused = not self.training  # the swapped Linears add the residual inside their GEMMs
        into_gemm = residual if fused and self.attention.fuses_residual else None
        out, probs = self.attention(
            hidden_states,
            position_embeddings,
            attention_bias,
            output_attentions,
            layout,
            first_token_of,
            into_gemm,
            adapter,
        )
        hidden_states = self.attn_ln(out if into_gemm is not None else residual + self.hidden_dropout(out))
        if fused and self.mlp.fuses_residual:
            return self.mlp_ln(self.mlp(hidden_states, residual=hidden_states)), probs
        return self.mlp_ln(hidden_states + self.hidden_dropout(self.mlp(hidden_states, adapter=out_adapter))), probs


class GteEncoder(nn.Module):
    """The layers under `encoder.layer`, as GTE's checkpoints name them."""

    def __init__(self, config: GteConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.layer = nn.ModuleList(GteLayer(config, attn_implementation) for _ in range(config.num_hidden_layers))


class GtePooler(nn.Module):
    """transformers' GtePooler: tanh(dense(x)) of each sequence's first token, given as (R, H) rows."""

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, first_tokens: Tensor) -> Tensor:
        return self.activation(self.dense(first_tokens))


# --- models --------------------------------------------------------------------


class GtePreTrainedModel(EncoderPreTrainedModel):
    """What every GTE class shares: its config class, base model prefix "gte", transformers' init."""

    config_class = GteConfig
    base_model_prefix = "gte"
    _as_config = staticmethod(_as_config)


class GteModel(GtePreTrainedModel):
    """transformers' GteModel: embeddings, the layers, an optional pooler; padded or packed batches."""

    def __init__(
        self, config: GteConfig, add_pooling_layer: bool = False, attn_implementation: str | None = None
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model, as BertModel's.
            add_pooling_layer: build the pooler (pooler_output), as the sequence classifier has; False (as
                transformers' default) leaves it out.
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation, else "sdpa".

        Raises:
            ValueError: an unknown attention name.
        """
        super().__init__(config)
        config = self.config
        attn_implementation = self._attention_name(attn_implementation)
        self.embeddings = GteEmbeddings(config)
        self.encoder = GteEncoder(config, attn_implementation)
        self.pooler = GtePooler(config) if add_pooling_layer else None
        self.rotary_emb = GteRotaryEmbedding(config)
        self._finish_base_model()

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
        lengths: Tensor | None = None,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Tensor, ...]:
        """Run a padded batch, as transformers does, or a packed one (each sequence's own rotary positions); both
        run the same modules.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens; None: nothing masked. Not packed.
            token_type_ids: (B, T) or packed (N,); None: zeros. Ignored without token type embeddings
                (type_vocab_size 0), as transformers does.
            position_ids: (B, T) rotary positions; None: 0..T-1. Not packed (each sequence counts from 0).
            inputs_embeds: (B, T, H) instead of input_ids (padded only).
            output_attentions: also return each layer's attention probabilities; None: the config's.
            output_hidden_states: also return the embedding output and each layer's; None: the config's.
            return_dict: a BaseModelOutputWithPooling; False: its tuple; None: the config's.
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; last_hidden_state and pooler_output are then
                those sequences' first-token rows (R, H).
            **kwargs: what transformers' forward also takes and bertlite ignores; anything else is a TypeError.

        Returns:
            last_hidden_state (B, T, H) (packed: (N, H)), pooler_output (B, H) or None, hidden_states and
            attentions when asked.

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does not take.
            TypeError: an unknown keyword.
        """
        check_forward_kwargs(type(self).__name__, kwargs)
        if self.embeddings.token_type_embeddings is None:
            token_type_ids = None  # no table to read them from: transformers ignores them too
        output = self._rotary_forward(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
            lengths,
            layout,
            first_token_of,
        )
        return self._returned(output, return_dict)

    def _embed(self, input_ids: Tensor | None, token_type_ids: Tensor | None, inputs_embeds: Tensor | None) -> Tensor:
        """The embeddings (word, token type, LayerNorm, dropout)."""
        return self.embeddings(input_ids, token_type_ids, inputs_embeds)


# Gradient checkpointing runs in GteModel; set_attn_implementation reaches each layer's attention.
GtePreTrainedModel._checkpointed_module_types = (GteModel,)
GtePreTrainedModel._attention_module_types = (GteAttention,)
