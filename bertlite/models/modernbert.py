"""ModernBERT: transformers' module tree and state_dict keys, padded and packed.

ModernBERT is no BERT with other names: its layers are pre-norm (`attn_norm`, `mlp_norm`; layer 0 has none),
attention runs one fused `attn.Wqkv` and rotary positions (a global base for full-attention layers, a local
one for sliding-window layers), the feed-forward is GeGLU (`mlp.Wi` gives input and gate, `mlp.Wo`), Linears and
LayerNorms may have no bias, and there is a `final_norm` and no pooler. So it has its own module tree here, on
the shared attention kernels (layers.attention) and PackedLayout, the PreTrainedModel surface and the loader.
A sliding-window layer is an additive window mask, (B, 1, T, T), on a padded batch; packed, each sequence
attends within its own rows, a chunk of queries at a time over only the keys their window reaches
(layers.attention.packed_windowed_attention; with attention "varlen" on the CPU, bertlite's C++ op, which takes
the window itself), so the window never crosses sequences and memory grows with the tokens, not with the square
of the longest text. The heads are in models.modernbert_heads. The layer declares
its parts (LayerRoles: Wqkv as one fused query|key|value Linear, Wi as a gated intermediate, Wo and mlp.Wo
taking the residual add), so the CPU's oneDNN Linears and int8 swap in as for BERT.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from bertlite.config.bert import as_bert_config
from bertlite.config.modernbert import LAYER_TYPES, ModernBertConfig
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import (
    DEFAULT_ATTENTION,
    PACKED_ATTENTION,
    check_attn_implementation,
    packed_eager_attention,
    packed_first_token_attention,
    packed_varlen_attention,
    packed_windowed_attention,
    padded_attention,
    window_bias,
)
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.layers.rotary import apply_rotary, rotate_query_key
from bertlite.models.encoder import EncoderPreTrainedModel, padding_bias
from bertlite.models.inputs import check_forward_kwargs, check_inputs
from bertlite.models.outputs import BaseModelOutputWithPooling


def _as_config(config: Any) -> ModernBertConfig:
    """A bertlite ModernBertConfig for a bertlite or transformers config."""
    return as_bert_config(config, ModernBertConfig)


# --- modules -----------------------------------------------------------------


class ModernBertEmbeddings(nn.Module):
    """transformers' ModernBertEmbeddings: token embeddings, LayerNorm, dropout; no positions (rotary, in attention)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids: Tensor | None = None, inputs_embeds: Tensor | None = None) -> Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.tok_embeddings(input_ids)
        return self.drop(self.norm(inputs_embeds))


class ModernBertRotaryEmbedding(nn.Module):
    """The rotary cos and sin of each position, per layer type (its own base, rope_parameters' rope_theta).

    transformers keeps the inverse frequencies in non-persistent buffers; they are computed on the host at each
    call here (head_dim / 2 numbers, as transformers computes them), so a model built on the meta device has
    nothing to re-fill.
    """

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.theta = {layer_type: config.rope_theta(layer_type) for layer_type in LAYER_TYPES}

    def inv_freq(self, layer_type: str) -> Tensor:
        """(head_dim / 2,) float32 inverse frequencies, as transformers' compute_default_rope_parameters."""
        dim = self.head_dim
        return 1.0 / (self.theta[layer_type] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))

    def forward(self, x: Tensor, position_ids: Tensor, layer_type: str) -> tuple[Tensor, Tensor]:
        """cos and sin, (..., head_dim) in x's dtype, for positions (B, T) or packed (N,)."""
        inv_freq = self.inv_freq(layer_type).to(device=x.device)
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class ModernBertAttention(nn.Module):
    """transformers' ModernBertAttention: Wqkv, rotary positions, attention by name (global or a sliding window), Wo."""

    def __init__(self, config: ModernBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = nn.Dropout(config.attention_dropout) if config.attention_dropout > 0.0 else nn.Identity()
        self.attention_dropout = config.attention_dropout
        self.attn_implementation = check_attn_implementation(attn_implementation)
        # Set by the module swap that installs a Wo taking forward(x, residual=) (layers.onednn.optimize,
        # quant.int8.quantize_int8): the layer's residual add then runs inside Wo's GEMM. Inference only.
        self.fuses_residual = False

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_bias: Tensor | int | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        residual: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """hidden_states (B, T, H) with an additive attention_bias ((B, 1, 1, T) or the window's (B, 1, T, T)), or
        packed (N, H) rows with their layout (attention_bias then the sliding window, an int: the tokens a query
        sees on each side, or None); first_token_of (packed): only these sequences' first-token queries, (R, H)
        out; residual: added inside Wo (fuses_residual, inference), the output then the layer's new hidden
        states."""
        name = "eager" if output_attentions else self.attn_implementation
        dropout_p = self.attention_dropout if self.training else 0.0
        cos, sin = position_embeddings
        qkv = self.Wqkv(hidden_states)
        if layout is not None:
            qkv = rotate_query_key(qkv, 2 * self.num_heads, self.head_dim, cos, sin)  # (N, 3H)
            context, probs = self._packed(qkv, layout, name, dropout_p, attention_bias, first_token_of)
            return self._out(context, residual), probs
        input_shape = hidden_states.shape[:-1]
        query, key, value = qkv.view(*input_shape, 3, -1, self.head_dim).unbind(dim=-3)
        query, key, value = (t.transpose(1, 2) for t in (query, key, value))  # (B, nh, T, hs)
        query = apply_rotary(query, cos[:, None], sin[:, None])
        key = apply_rotary(key, cos[:, None], sin[:, None])
        context, probs = padded_attention(name)(query, key, value, attention_bias, self.scaling, dropout_p)
        context = context.reshape(*input_shape, -1).contiguous()  # (B, T, H)
        return self._out(context, residual), probs

    def _packed(
        self,
        qkv: Tensor,
        layout: PackedLayout,
        name: str,
        dropout_p: float,
        window: int | None,
        first_token_of: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention on packed rows: global (window None), or each sequence's own sliding window, never a (T, T)
        grid except for the eager reference (which gives probabilities)."""
        args = (qkv, layout, self.num_heads, self.scaling, dropout_p)
        if first_token_of is not None:
            # Every first token is at position 0: its row of the window is the only one read.
            bias = None if window is None else window_bias(range(1), range(layout.max_length), window, qkv)[None, None]
            return packed_first_token_attention(*args[:2], first_token_of, *args[2:], bias), None
        if window is None:
            return PACKED_ATTENTION[name](*args)
        if name == "eager":
            grid = range(layout.max_length)
            return packed_eager_attention(*args, window_bias(grid, grid, window, qkv)[None, None])
        if name == "varlen":
            return packed_varlen_attention(*args, window)
        return packed_windowed_attention(*args, window)

    def _out(self, context: Tensor, residual: Tensor | None) -> Tensor:
        """Wo on the context: with the residual added in its GEMM when given (fuses_residual: no dropout runs)."""
        return self.Wo(context, residual=residual) if residual is not None else self.out_drop(self.Wo(context))


class ModernBertMLP(nn.Module):
    """transformers' ModernBertMLP: GeGLU, Wo(drop(act(input) * gate)) with input, gate = Wi(x)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, config.intermediate_size * 2, bias=config.mlp_bias)
        self.hidden_act = config.hidden_activation  # by name too, for the module swap that restores `act`
        self.act = ACT2FN[config.hidden_activation]
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.fuses_residual = False  # as ModernBertAttention's, for Wo
        self.gated_product: nn.Module | None = None  # act(gate) * up in one module, set by layers.onednn.optimize

    def forward(self, hidden_states: Tensor, residual: Tensor | None = None) -> Tensor:
        """(..., H) -> (..., H); residual (fuses_residual, inference): added inside Wo's GEMM, no dropout."""
        if self.gated_product is not None:
            product = self.gated_product(hidden_states)
        else:
            input, gate = self.Wi(hidden_states).chunk(2, dim=-1)
            product = self.act(input) * gate
        if residual is not None:
            return self.Wo(product, residual=residual)
        return self.Wo(self.drop(product))


class ModernBertEncoderLayer(nn.Module):
    """transformers' ModernBertEncoderLayer: x + attn(attn_norm(x)), then x + mlp(mlp_norm(x)) (pre-norm)."""

    # Where its parts are, for the module swaps (bertlite.layers.roles): Wo and mlp.Wo take the residual add
    # into their GEMMs once swapped (residual_owners).
    roles = LayerRoles(
        attention="attn",
        query="",
        key="",
        value="",
        attention_output="attn.Wo",
        intermediate="mlp.Wi",
        activation="mlp.act",
        output="mlp.Wo",
        qkv="attn.Wqkv",
        gated=True,
        residual_owners={"attention_output": "attn", "output": "mlp"},
    )

    def __init__(self, config: ModernBertConfig, layer_idx: int, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        if layer_idx == 0:
            self.attn_norm: nn.Module = nn.Identity()  # the embeddings' norm comes right before
        else:
            self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.attn = ModernBertAttention(config, attn_implementation)  # the layer's bias says global or sliding
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)
        self.attention_type = config.layer_types[layer_idx]

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_bias: Tensor | int | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """first_token_of (packed): only these sequences' first-token rows come out, (R, H); every row's keys
        and values are still computed."""
        normed = self.attn_norm(hidden_states)
        if first_token_of is not None:
            hidden_states = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        fused = not self.training  # the swapped Linears add the residual inside their GEMMs
        residual = hidden_states if fused and self.attn.fuses_residual else None
        attn_output, probs = self.attn(
            normed, position_embeddings, attention_bias, output_attentions, layout, first_token_of, residual
        )
        hidden_states = attn_output if residual is not None else hidden_states + attn_output
        if fused and self.mlp.fuses_residual:
            return self.mlp(self.mlp_norm(hidden_states), residual=hidden_states), probs
        return hidden_states + self.mlp(self.mlp_norm(hidden_states)), probs


# --- models --------------------------------------------------------------------


def init_stds(config: ModernBertConfig) -> dict[str, float]:
    """transformers' init stds by a Linear's place.

    Args:
        config: the model's config.

    Returns:
        "in" (Wqkv, Wi, embeddings), "out" (Wo, by depth; the heads' dense and decoder), "final_out" (classifiers).
    """
    return {
        "in": config.initializer_range,
        "out": config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers),
        "final_out": config.hidden_size**-0.5,
    }


@torch.no_grad()
def trunc_normal_init(module: nn.Module, std: float, cutoff: float) -> None:
    """A truncated normal at `std`, cut at `cutoff` stds, for the weight; zeros for a Linear's bias.

    Args:
        module: a Linear or an Embedding, changed in place.
        std: the normal's std.
        cutoff: where it is cut, in stds (config.initializer_cutoff_factor).
    """
    nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-cutoff * std, b=cutoff * std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        module.bias.zero_()


class ModernBertPredictionHead(nn.Module):
    """transformers' ModernBertPredictionHead: norm(act(dense(x))), the heads' shared transform."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, config.classifier_bias)
        self.act = ACT2FN[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(hidden_states)))


class ModernBertPreTrainedModel(EncoderPreTrainedModel):
    """What every ModernBERT class shares: its config class, base model prefix "model", transformers' init."""

    config_class = ModernBertConfig
    base_model_prefix = "model"
    _as_config = staticmethod(_as_config)
    _layers_path = "layers"
    _attention_path = "attn"
    _input_embeddings_path = "embeddings.tok_embeddings"
    # A head's Linears and their init std (init_stds' keys), after the base model's scheme.
    head_inits: ClassVar[dict[str, str]] = {}

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """transformers' scheme: truncated normals (std by the Linear's place), LayerNorms at 1 and 0, biases 0;
        and for a head's Linears (head.dense, decoder, classifier)."""
        stds = init_stds(self.config)

        def init(linear: nn.Module, std: float) -> None:
            trunc_normal_init(linear, std, self.config.initializer_cutoff_factor)

        if isinstance(module, ModernBertPredictionHead):
            init(module.dense, stds["out"])
        for name, std in self.head_inits.items():
            if module is getattr(self, name, None):
                init(module, stds[std])

        if isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, ModernBertEmbeddings):
            init(module.tok_embeddings, stds["in"])
        elif isinstance(module, (ModernBertMLP, ModernBertAttention)):
            init(module.Wi if isinstance(module, ModernBertMLP) else module.Wqkv, stds["in"])
            init(module.Wo, stds["out"])


class ModernBertModel(ModernBertPreTrainedModel):
    """transformers' ModernBertModel: embeddings, layers, final_norm; padded or packed batches."""

    def __init__(
        self, config: ModernBertConfig, add_pooling_layer: bool = False, attn_implementation: str | None = None
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model, as BertModel's.
            add_pooling_layer: must be False: ModernBERT has no pooler (the jobs' "pooler" pooling mode).
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation, else "sdpa".

        Raises:
            ValueError: add_pooling_layer=True, or an unknown attention name.
        """
        super().__init__(config)
        config = self.config
        if add_pooling_layer:
            raise ValueError("ModernBERT has no pooler: use cls or mean pooling, not the pooler output")
        attn_implementation = self._attention_name(attn_implementation)
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(
            ModernBertEncoderLayer(config, i, attn_implementation) for i in range(config.num_hidden_layers)
        )
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.rotary_emb = ModernBertRotaryEmbedding(config)
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
        """Run a padded batch, as transformers does, or a packed one (each sequence's own rotary positions
        and sliding window); both run the same modules.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens; None: nothing masked. Not packed.
            position_ids: (B, T) rotary positions; None: 0..T-1. Not packed (each sequence counts from 0).
            inputs_embeds: (B, T, H) instead of input_ids (padded only).
            output_attentions: also return each layer's attention probabilities; None: the config's.
            output_hidden_states: also return the embedding output and each layer's; None: the config's.
            return_dict: a BaseModelOutputWithPooling (pooler_output None); False: its tuple; None: the config's.
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; last_hidden_state is then those sequences'
                first-token rows (R, H).
            **kwargs: token_type_ids is ignored (ModernBERT has none; the jobs pass a tokenizer's zeros), and
                what transformers' forward also takes and bertlite ignores; anything else is a TypeError.

        Returns:
            last_hidden_state (B, T, H) (packed: (N, H)), hidden_states and attentions when asked.

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does not take.
            TypeError: an unknown keyword.
        """
        kwargs.pop("token_type_ids", None)
        check_forward_kwargs(type(self).__name__, kwargs)
        output_attentions, output_hidden_states = self._output_flags(output_attentions, output_hidden_states)
        if self._is_packed(attention_mask, position_ids, inputs_embeds, lengths, layout, first_token_of):
            layout = self._packed_layout(input_ids, None, lengths, layout, first_token_of, output_attentions)
            hidden_states = self.embeddings(input_ids=input_ids)
            position_ids = layout.positions
            window = self.config.sliding_window
            # Packed, a sliding layer gets its window's size, not a (T, T) bias: it attends per sequence, in chunks.
            biases: dict[str, Tensor | int | None] = {"full_attention": None, "sliding_attention": None}
            if layout.max_length > window + 1:  # else every key is within every query's window
                biases["sliding_attention"] = window
        else:
            check_inputs(self.config, input_ids, inputs_embeds, attention_mask, None, position_ids)
            hidden_states = self.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)
            if position_ids is None:
                position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
            elif position_ids.dim() == 1:
                position_ids = position_ids.unsqueeze(0)  # (1, T)
            biases = self._padded_biases(attention_mask, hidden_states)
        types = {layer.attention_type for layer in self.layers}
        rotary = {t: self.rotary_emb(hidden_states, position_ids, t) for t in sorted(types)}
        last = len(self.layers) - 1

        def layer_args(i: int, layer: nn.Module) -> tuple[Any, ...]:
            # first_token_of (packed): the last layer computes only these sequences' first-token rows.
            kind = layer.attention_type
            return rotary[kind], biases[kind], output_attentions, layout, first_token_of if i == last else None

        out = self._layer_loop(
            hidden_states, self.layers, layer_args, output_attentions, output_hidden_states, self.final_norm
        )
        return self._returned(BaseModelOutputWithPooling(out[0], None, *out[1:]), return_dict)

    def _padded_biases(self, attention_mask: Tensor | None, embeddings: Tensor) -> dict[str, Tensor | None]:
        """Each layer type's additive bias on a padded batch: padding only for full attention ((B, 1, 1, T), None
        when nothing is masked), padding and the window for sliding layers ((B, 1, T, T), None when no layer
        slides)."""
        full = padding_bias(attention_mask, embeddings)
        if all(layer.attention_type == "full_attention" for layer in self.layers):
            return {"full_attention": full, "sliding_attention": None}
        length, dtype, device = embeddings.shape[1], embeddings.dtype, embeddings.device
        positions = torch.arange(length, device=device)
        near = (positions[None, :] - positions[:, None]).abs() <= self.config.sliding_window  # (T, T)
        # full is 0 exactly on the kept keys (dtype-min elsewhere), so it doubles as the padding mask here.
        sliding = near[None, None] if full is None else (full == 0) & near  # (B, 1, T, T)
        windowed = torch.zeros(sliding.shape, dtype=dtype, device=device).masked_fill_(~sliding, torch.finfo(dtype).min)
        return {"full_attention": full, "sliding_attention": windowed}


# Gradient checkpointing runs in ModernBertModel; set_attn_implementation reaches each layer's attention.
ModernBertPreTrainedModel._checkpointed_module_types = (ModernBertModel,)
ModernBertPreTrainedModel._attention_module_types = (ModernBertAttention,)
