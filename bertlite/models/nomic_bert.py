"""NomicBERT: transformers' NomicBertModel on the keys its checkpoints hold, padded and packed.

NomicBERT (nomic-embed-text-v1/v1.5, nomic-bert-2048) is BERT's post-norm layer with rotary positions instead of
position embeddings, bias-free attention (`attn.q_proj`, `k_proj`, `v_proj`, `out_proj`), a SwiGLU feed-forward
(`mlp.fc2(act(mlp.fc12(x)) * mlp.fc11(x))`, no biases), LayerNorms `norm1` and `norm2`, and the embeddings'
LayerNorm `emb_ln` beside them. The checkpoints (transformers 5 saves its native `nomic_bert` so too) fuse
query|key|value as `attn.Wqkv`; the module tree holds them apart, as transformers' does (so PEFT finds q_proj and
v_proj), and the load splits them and the save fuses them back (checkpoint.remap's FUSED_LINEARS); the other names
are the checkpoints'. Attention runs the shared kernels (layers.attention) padded or on PackedLayout's rows; the
rotary positions are layers.rotary's. The layer declares its parts (LayerRoles: q/k/v, whose one GEMM the module
swaps install in the attention's `qkv` slot, fc12 the intermediate with its activation, out_proj and fc2 taking
the residual add, fc11 the gated feed-forward's up projection), so the CPU's oneDNN Linears and int8 swap in as for
BERT. The heads are in models.nomic_bert_heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config.bert import as_bert_config
from bertlite.config.nomic_bert import NomicBertConfig
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


def _as_config(config: Any) -> NomicBertConfig:
    """A bertlite NomicBertConfig for a bertlite or transformers config."""
    return as_bert_config(config, NomicBertConfig)


# --- modules -----------------------------------------------------------------


class NomicBertEmbeddings(nn.Module):
    """NomicBERT's embeddings: word and token type embeddings, summed (the LayerNorm is the model's emb_ln)."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """(B, T) or packed (N,) ids (or inputs_embeds) to (..., H); token_type_ids None: zeros."""
        embeddings = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if token_type_ids is None:
            token_type_ids = torch.zeros(embeddings.shape[:-1], dtype=torch.long, device=embeddings.device)
        return embeddings + self.token_type_embeddings(token_type_ids)


class NomicBertRotaryEmbedding(nn.Module):
    """The rotary cos and sin of each position (rope_parameters' rope_theta), as transformers' default rope.

    The inverse frequencies are computed on the host at each call (head_dim / 2 numbers), so a model built on
    the meta device has no buffer to re-fill.
    """

    def __init__(self, config: NomicBertConfig) -> None:
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


class NomicBertAttention(nn.Module):
    """transformers' NomicBertAttention: q_proj, k_proj, v_proj, rotary positions, attention by name, out_proj (its
    o_proj; no biases)."""

    def __init__(self, config: NomicBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.out_proj = nn.Linear(hidden, hidden, bias=False)
        self.qkv: nn.Module | None = None  # q|k|v in one GEMM, installed by the module swaps (roles' qkv slot)
        self.attention_dropout = config.attention_probs_dropout_prob
        self.attn_implementation = check_attn_implementation(attn_implementation)
        # Set by the module swap that installs an out_proj taking forward(x, residual=) (layers.onednn.optimize,
        # quant.int8.quantize_int8): the layer's residual add then runs inside its GEMM. Inference only.
        self.fuses_residual = False

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
        inside out_proj (fuses_residual, inference)."""
        name = "eager" if output_attentions else self.attn_implementation
        dropout_p = self.attention_dropout if self.training else 0.0
        cos, sin = position_embeddings
        qkv = self._qkv(hidden_states)
        if layout is not None:
            qkv = rotate_query_key(qkv, 2 * self.num_heads, self.head_dim, cos, sin)  # (N, 3H)
            args = (qkv, layout, self.num_heads, self.scaling, dropout_p)
            if first_token_of is not None:
                context, probs = packed_first_token_attention(*args[:2], first_token_of, *args[2:]), None
            else:
                context, probs = PACKED_ATTENTION[name](*args)
            return self._out(context, residual), probs
        input_shape = hidden_states.shape[:-1]
        query, key, value = qkv.view(*input_shape, 3, -1, self.head_dim).unbind(dim=-3)
        query, key, value = (t.transpose(1, 2) for t in (query, key, value))  # (B, nh, T, hs)
        query = apply_rotary(query, cos[:, None], sin[:, None])
        key = apply_rotary(key, cos[:, None], sin[:, None])
        context, probs = padded_attention(name)(query, key, value, attention_bias, self.scaling, dropout_p)
        context = context.reshape(*input_shape, -1).contiguous()  # (B, T, H)
        return self._out(context, residual), probs

    def _qkv(self, hidden_states: Tensor) -> Tensor:
        """(..., 3H) query|key|value: the swapped-in one GEMM, or the three Linears."""
        if self.qkv is not None:
            return self.qkv(hidden_states)
        return torch.cat([self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)], dim=-1)

    def _out(self, context: Tensor, residual: Tensor | None) -> Tensor:
        """out_proj on the context, with the residual added in its GEMM when given (fuses_residual)."""
        return self.out_proj(context, residual=residual) if residual is not None else self.out_proj(context)


class NomicBertMLP(nn.Module):
    """NomicBERT's SwiGLU feed-forward: fc2(act(fc12(x)) * fc11(x)), no biases."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.fc11 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)  # up
        self.fc12 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)  # gate
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that restores `act_fn`
        self.act_fn = ACT2FN[config.hidden_act]
        self.fuses_residual = False  # as NomicBertAttention's, for fc2
        self.gated_product: nn.Module | None = None  # act(gate) * up in one module, set by layers.onednn.optimize

    def forward(self, hidden_states: Tensor, residual: Tensor | None = None) -> Tensor:
        """(..., H) -> (..., H); residual (fuses_residual, inference): added inside fc2's GEMM."""
        if self.gated_product is not None:
            gated = self.gated_product(hidden_states)
        else:
            gated = self.act_fn(self.fc12(hidden_states)) * self.fc11(hidden_states)
        return self.fc2(gated, residual=residual) if residual is not None else self.fc2(gated)


class NomicBertLayer(nn.Module):
    """NomicBERT's post-norm layer: norm1(x + attn(x)), then norm2(x + mlp(x))."""

    # Where its parts are, for the module swaps (bertlite.layers.roles).
    roles = LayerRoles(
        attention="attn",
        query="attn.q_proj",
        key="attn.k_proj",
        value="attn.v_proj",
        attention_output="attn.out_proj",
        intermediate="mlp.fc12",
        activation="mlp.act_fn",
        output="mlp.fc2",
        gated=True,
        up="mlp.fc11",
        residual_owners={"attention_output": "attn", "output": "mlp"},
    )

    def __init__(self, config: NomicBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attn = NomicBertAttention(config, attn_implementation)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = NomicBertMLP(config)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)

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
        residual = hidden_states
        if first_token_of is not None:
            residual = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        fused = not self.training  # the swapped Linears add the residual inside their GEMMs
        into_gemm = residual if fused and self.attn.fuses_residual else None
        out, probs = self.attn(
            hidden_states, position_embeddings, attention_bias, output_attentions, layout, first_token_of, into_gemm
        )
        hidden_states = self.norm1(out if into_gemm is not None else residual + self.hidden_dropout(out))
        if fused and self.mlp.fuses_residual:
            return self.norm2(self.mlp(hidden_states, residual=hidden_states)), probs
        return self.norm2(hidden_states + self.hidden_dropout(self.mlp(hidden_states))), probs


class NomicBertEncoder(nn.Module):
    """The layers under `encoder.layers`, as NomicBERT's checkpoints name them."""

    def __init__(self, config: NomicBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            NomicBertLayer(config, attn_implementation) for _ in range(config.num_hidden_layers)
        )

    @property
    def layer(self) -> nn.ModuleList:
        """The layers under BERT's name, where the module swaps and parity look for them."""
        return self.layers


class NomicBertPooler(nn.Module):
    """transformers' NomicBertPooler: tanh(dense(x)) of each sequence's first token, given as (R, H) rows."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, first_tokens: Tensor) -> Tensor:
        return self.activation(self.dense(first_tokens))


# --- models --------------------------------------------------------------------


class NomicBertPreTrainedModel(EncoderPreTrainedModel):
    """What every NomicBERT class shares: its config class, base model prefix "nomic_bert", transformers' init."""

    config_class = NomicBertConfig
    base_model_prefix = "nomic_bert"
    _as_config = staticmethod(_as_config)
    _attention_path = "attn"


class NomicBertModel(NomicBertPreTrainedModel):
    """transformers' NomicBertModel: embeddings and emb_ln, the layers, an optional pooler; padded or packed."""

    def __init__(
        self, config: NomicBertConfig, add_pooling_layer: bool = False, attn_implementation: str | None = None
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
        self.embeddings = NomicBertEmbeddings(config)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.emb_drop = nn.Dropout(config.hidden_dropout_prob)
        self.encoder = NomicBertEncoder(config, attn_implementation)
        self.pooler = NomicBertPooler(config) if add_pooling_layer else None
        self.rotary_emb = NomicBertRotaryEmbedding(config)
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
            token_type_ids: (B, T) or packed (N,); None: zeros.
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
        """The embeddings, then emb_ln and dropout, as transformers' NomicBertEmbeddings runs them."""
        return self.emb_drop(self.emb_ln(self.embeddings(input_ids, token_type_ids, inputs_embeds)))


# Gradient checkpointing runs in NomicBertModel; set_attn_implementation reaches each layer's attention.
NomicBertPreTrainedModel._checkpointed_module_types = (NomicBertModel,)
NomicBertPreTrainedModel._attention_module_types = (NomicBertAttention,)
