"""EuroBERT: transformers' module tree and state_dict keys, padded and packed.

EuroBERT is a Llama-style encoder: pre-norm layers (`input_layernorm`, `post_attention_layernorm`, RMSNorm),
attention with q_proj/k_proj/v_proj/o_proj, rotary positions and grouped-query heads (num_key_value_heads key and
value heads, each shared by a group of query heads), a SwiGLU feed-forward (down_proj(act(gate_proj(x)) *
up_proj(x))), a final `norm` and no pooler. It has its own module tree here, on the shared attention kernels
(layers.attention) and PackedLayout; the rotary positions are layers.rotary's. Packed, each key and value
head is repeated for its group, so every packed attention runs it. The layer declares its parts (LayerRoles: q/k/v,
o_proj and down_proj taking the residual add, gate_proj as the intermediate with its activation), so the CPU's
oneDNN Linears swap in as for BERT; up_proj stays a plain Linear. The heads are in models.eurobert_heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config.bert import as_bert_config
from bertlite.config.eurobert import EuroBertConfig
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import (
    DEFAULT_ATTENTION,
    PACKED_ATTENTION,
    check_attn_implementation,
    packed_first_token_attention,
    padded_attention,
)
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.layers.rotary import apply_rotary, rotate_query_key
from bertlite.models.encoder import EncoderPreTrainedModel
from bertlite.models.inputs import check_forward_kwargs
from bertlite.models.outputs import BaseModelOutputWithPooling


def _as_config(config: Any) -> EuroBertConfig:
    """A bertlite EuroBertConfig for a bertlite or transformers config."""
    return as_bert_config(config, EuroBertConfig)


# --- modules -----------------------------------------------------------------


class EuroBertRMSNorm(nn.Module):
    """transformers' EuroBertRMSNorm: x / rms(x) in float32, times weight (no bias)."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: Tensor) -> Tensor:
        dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        normed = (hidden_states * torch.rsqrt(variance + self.variance_epsilon)).to(dtype)
        if torch.is_grad_enabled() or normed.dtype != self.weight.dtype:
            return self.weight * normed
        return normed.mul_(self.weight)  # the same product, without one more activation-sized tensor


class EuroBertRotaryEmbedding(nn.Module):
    """The rotary cos and sin of each position (rope_parameters' rope_theta), computed on the host at each call."""

    def __init__(self, config: EuroBertConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.theta = config.rope_theta

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin, (..., head_dim) in x's dtype, for positions (B, T) or packed (N,)."""
        dim = self.head_dim
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        freqs = position_ids[..., None].float() * inv_freq.to(device=x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class EuroBertAttention(nn.Module):
    """transformers' EuroBertAttention: q/k/v projections, rotary positions, grouped-query attention by name, o_proj."""

    def __init__(self, config: EuroBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.groups = self.num_heads // self.num_key_value_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.attention_dropout = config.attention_dropout
        self.attn_implementation = check_attn_implementation(attn_implementation)
        self.qkv: nn.Module | None = None  # q|k|v in one GEMM, installed by the module swaps (roles' qkv slot)
        self.fuses_residual = False  # set by the swap whose o_proj takes forward(x, residual=)

    def _projections(self, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.qkv is None:
            return self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)
        kv = self.num_key_value_heads * self.head_dim
        query, key, value = self.qkv(hidden_states).split([self.num_heads * self.head_dim, kv, kv], dim=-1)
        return query, key, value

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        residual: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """hidden_states (B, T, H) with an additive attention_bias (B, 1, 1, T), or packed (N, H) rows with their
        layout; first_token_of (packed): only these sequences' first-token queries, (R, H) out; residual: added
        inside o_proj (fuses_residual, inference)."""
        name = "eager" if output_attentions else self.attn_implementation
        dropout_p = self.attention_dropout if self.training else 0.0
        cos, sin = position_embeddings
        if layout is not None:
            qkv = self._packed_qkv(hidden_states, cos, sin)
            args = (qkv, layout, self.num_heads, self.scaling, dropout_p)
            if first_token_of is not None:
                context, probs = packed_first_token_attention(*args[:2], first_token_of, *args[2:]), None
            else:
                context, probs = PACKED_ATTENTION[name](*args)
            return self._out(context, residual), probs
        query, key, value = self._projections(hidden_states)
        lead = hidden_states.shape[:-1]
        query = query.view(*lead, self.num_heads, self.head_dim)  # (B, T, nh, hs)
        key = key.view(*lead, self.num_key_value_heads, self.head_dim)  # (B, T, nkv, hs)
        value = value.view(*lead, self.num_key_value_heads, self.head_dim)
        query, key, value = (t.transpose(1, 2) for t in (query, key, value))  # (B, heads, T, hs)
        query = apply_rotary(query, cos[:, None], sin[:, None])
        key = apply_rotary(key, cos[:, None], sin[:, None])
        if self.groups > 1:  # else value stays the strided view transformers multiplies, for the same bits
            key, value = (t.repeat_interleave(self.groups, dim=1) for t in (key, value))  # (B, nh, T, hs)
        context, probs = padded_attention(name)(query, key, value, attention_bias, self.scaling, dropout_p)
        context = context.reshape(*lead, -1).contiguous()  # (B, T, nh * hs)
        return self._out(context, residual), probs

    def _packed_qkv(self, hidden_states: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """(N, 3 * nh * hs) packed query|key|value rows, rotated, each key and value head repeated for its group."""
        if self.qkv is None:
            qkv = torch.cat(self._projections(hidden_states), dim=-1)
        else:
            qkv = self.qkv(hidden_states)  # (N, (nh + 2 * nkv) * hs)
        qkv = rotate_query_key(qkv, self.num_heads + self.num_key_value_heads, self.head_dim, cos, sin)
        if self.groups == 1:
            return qkv
        heads = qkv.view(len(qkv), -1, self.head_dim)
        query, key, value = heads.split([self.num_heads, self.num_key_value_heads, self.num_key_value_heads], dim=1)
        rows = [query, *(t.repeat_interleave(self.groups, dim=1) for t in (key, value))]  # each (N, nh, hs)
        return torch.cat(rows, dim=1).view(len(qkv), -1)

    def _out(self, context: Tensor, residual: Tensor | None) -> Tensor:
        """o_proj on the context, with the residual added in its GEMM when given (fuses_residual)."""
        return self.o_proj(context, residual=residual) if residual is not None else self.o_proj(context)


class EuroBertMLP(nn.Module):
    """transformers' EuroBertMLP: down_proj(act(gate_proj(x)) * up_proj(x))."""

    def __init__(self, config: EuroBertConfig) -> None:
        super().__init__()
        bias = config.mlp_bias
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that restores `act_fn`
        self.act_fn = ACT2FN[config.hidden_act]
        self.fuses_residual = False  # as EuroBertAttention's, for down_proj
        self.gated_product: nn.Module | None = None  # act(gate) * up in one module, set by layers.onednn.optimize

    def forward(self, hidden_states: Tensor, residual: Tensor | None = None) -> Tensor:
        """(..., H) -> (..., H); residual (fuses_residual, inference): added inside down_proj's GEMM."""
        if self.gated_product is not None:
            gated = self.gated_product(hidden_states)
        else:
            gated = self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states)
        return self.down_proj(gated, residual=residual) if residual is not None else self.down_proj(gated)


class EuroBertDecoderLayer(nn.Module):
    """transformers' EuroBertDecoderLayer (bidirectional): x + attn(input_layernorm(x)), then
    x + mlp(post_attention_layernorm(x))."""

    # Where its parts are, for the module swaps (bertlite.layers.roles): gate_proj takes the activation into
    # its GEMM, up_proj stays as it is.
    roles = LayerRoles(
        attention="self_attn",
        query="self_attn.q_proj",
        key="self_attn.k_proj",
        value="self_attn.v_proj",
        attention_output="self_attn.o_proj",
        intermediate="mlp.gate_proj",
        activation="mlp.act_fn",
        output="mlp.down_proj",
        gated=True,
        up="mlp.up_proj",
        residual_owners={"attention_output": "self_attn", "output": "mlp"},
    )

    def __init__(self, config: EuroBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.self_attn = EuroBertAttention(config, attn_implementation)
        self.mlp = EuroBertMLP(config)
        self.input_layernorm = EuroBertRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = EuroBertRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """first_token_of (packed): only these sequences' first-token rows come out, (R, H)."""
        normed = self.input_layernorm(hidden_states)
        if first_token_of is not None:
            hidden_states = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        fused = not self.training  # the swapped Linears add the residual inside their GEMMs
        residual = hidden_states if fused and self.self_attn.fuses_residual else None
        out, probs = self.self_attn(
            normed, position_embeddings, attention_bias, output_attentions, layout, first_token_of, residual
        )
        hidden_states = out if residual is not None else hidden_states + out
        if fused and self.mlp.fuses_residual:
            return self.mlp(self.post_attention_layernorm(hidden_states), residual=hidden_states), probs
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states)), probs


# --- models --------------------------------------------------------------------


class EuroBertPreTrainedModel(EncoderPreTrainedModel):
    """What every EuroBERT class shares: its config class, base model prefix "model", transformers' init."""

    config_class = EuroBertConfig
    base_model_prefix = "model"
    _as_config = staticmethod(_as_config)
    _layers_path = "layers"
    _attention_path = "self_attn"
    _input_embeddings_path = "embed_tokens"
    _norm_types = (EuroBertRMSNorm,)


class EuroBertModel(EuroBertPreTrainedModel):
    """transformers' EuroBertModel: embed_tokens, the layers, norm; padded or packed batches."""

    def __init__(
        self, config: EuroBertConfig, add_pooling_layer: bool = False, attn_implementation: str | None = None
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model, as BertModel's.
            add_pooling_layer: must be False: EuroBERT has no pooler.
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation, else "sdpa".

        Raises:
            ValueError: add_pooling_layer=True, or an unknown attention name.
        """
        super().__init__(config)
        config = self.config
        if add_pooling_layer:
            raise ValueError("EuroBERT has no pooler: use cls or mean pooling, not the pooler output")
        attn_implementation = self._attention_name(attn_implementation)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.layers = nn.ModuleList(
            EuroBertDecoderLayer(config, attn_implementation) for _ in range(config.num_hidden_layers)
        )
        self.norm = EuroBertRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = EuroBertRotaryEmbedding(config)
        self.pooler = None  # as BertModel without one: the jobs read pooler_output as None
        self._finish_base_model()

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
        """Run a padded batch, as transformers does, or a packed one (each sequence's own rotary positions); both
        run the same modules.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens; None: nothing masked. Not packed.
            position_ids: (B, T) rotary positions; None: 0..T-1. Not packed (each sequence counts from 0).
            inputs_embeds: (B, T, H) instead of input_ids (padded only).
            output_attentions: also return each layer's attention probabilities; None: the config's.
            output_hidden_states: also return the embeddings and each layer's output; None: the config's.
            return_dict: a BaseModelOutputWithPooling (pooler_output None); False: its tuple; None: the config's.
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; last_hidden_state is then those sequences'
                first-token rows (R, H).
            **kwargs: token_type_ids is ignored (EuroBERT has none; the jobs pass a tokenizer's zeros), and
                what transformers' forward also takes and bertlite ignores; anything else is a TypeError.

        Returns:
            last_hidden_state (B, T, H) (packed: (N, H)), hidden_states and attentions when asked.

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does not take.
            TypeError: an unknown keyword.
        """
        kwargs.pop("token_type_ids", None)
        check_forward_kwargs(type(self).__name__, kwargs)
        output = self._rotary_forward(
            input_ids,
            attention_mask,
            None,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
            lengths,
            layout,
            first_token_of,
            self.norm,
        )
        return self._returned(output, return_dict)

    def _embed(self, input_ids: Tensor | None, token_type_ids: Tensor | None, inputs_embeds: Tensor | None) -> Tensor:
        """embed_tokens' rows (EuroBERT has no token types), or inputs_embeds."""
        return self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds


# Gradient checkpointing runs in EuroBertModel; set_attn_implementation reaches each layer's attention.
EuroBertPreTrainedModel._checkpointed_module_types = (EuroBertModel,)
EuroBertPreTrainedModel._attention_module_types = (EuroBertAttention,)
