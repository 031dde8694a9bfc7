"""JinaBERT-v2: jinaai/jina-bert-implementation's JinaBertModel on BERT's module tree, padded and packed.

JinaBERT-v2 (jina-embeddings-v2-base-en and kin) is BERT's post-norm encoder with three changes, each one class
here: the embeddings have no position table (JinaBertEmbeddings: words, token types, LayerNorm); every layer adds
a symmetric ALiBi bias, -slope_h * |i - j|, to its scaled attention scores (JinaBertEncoder.position_bias, the
per-head slopes of alibi_head_slopes); and the feed-forward is a gated one under `mlp` (JinaBertGLUMLP:
layernorm(wo(act(gated) * non_gated) + x), gated|non_gated = gated_layers(x)). Attention is BERT's, under BERT's
names, and so are the pooler and the heads' modules, so the original checkpoints' keys load unchanged. The bias
depends only on the distance between tokens, so a packed sequence of length L reads the [:L, :L] corner of one
grid's bias, as MPNet's relative bias (bertlite.layers.attention). jina-embeddings-v2-base-code's variant
(jinaai/jina-bert-v2-qk-post-norm's code) LayerNorms query and key (layer_norm_q, layer_norm_k) and wraps the
attention and its gated feed-forward (mlp.up_gated_layer: up|gated, up * act(gated), mlp.down_layer) in the layer's
own post-norms layer_norm_1 and layer_norm_2 (JinaBertQKPostNormLayer). The heads are in models.jina_bert_heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bertlite.config.jina_bert import JinaBertConfig
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import DEFAULT_ATTENTION
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.models.bert import BertAttention, BertEncoder, BertModel, BertSelfAttention
from bertlite.models.heads import family_config

__all__ = ["JinaBertModel", "alibi_head_slopes"]


def alibi_head_slopes(num_heads: int) -> list[float]:
    """The original's _get_alibi_head_slopes: a geometric sequence starting at 2 ** (-8 / n) for n heads a power
    of 2; otherwise the slopes of the power of 2 below, then every other slope of twice that power.

    Args:
        num_heads: the attention heads.

    Returns:
        One slope per head.
    """

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_2(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_2(closest) + alibi_head_slopes(2 * closest)[0::2][: num_heads - closest]


class JinaBertEmbeddings(nn.Module):
    """The original's JinaBertEmbeddings with position_embedding_type "alibi": words plus token types, LayerNorm,
    dropout; no position table."""

    def __init__(self, config: JinaBertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.first_position = 0  # BertModel reads it on a packed batch; no position is embedded

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """BertEmbeddings' call; position_ids is taken and not read (ALiBi positions are in the attention)."""
        embeddings = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if token_type_ids is None:
            token_type_ids = torch.zeros(embeddings.shape[:-1], dtype=torch.long, device=embeddings.device)
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


class JinaBertSelfAttention(BertSelfAttention):
    """The original's JinaBertSelfAttention: BERT's query, key and value, the ALiBi bias added to the scaled
    scores (BertSelfAttention's position_bias)."""


class JinaBertQKPostNormSelfAttention(BertSelfAttention):
    """jina-bert-v2-qk-post-norm's JinaBertSelfAttention: the query and the key each LayerNorm-ed over the hidden
    size (layer_norm_q, layer_norm_k) before the heads are split; the rest as JinaBertSelfAttention."""

    def __init__(self, config: JinaBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__(config, attn_implementation)
        self.layer_norm_q = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layer_norm_k = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def projections(self, hidden_states: Tensor) -> tuple[Tensor, ...]:
        """layer_norm_q(query), layer_norm_k(key) and value of hidden_states (..., H)."""
        query, key, value = super().projections(hidden_states)
        return self.layer_norm_q(query), self.layer_norm_k(key), value

    def packed_qkv(self, hidden_states: Tensor) -> Tensor:
        """The normalized query|key|value of every row, (N, 3H)."""
        return torch.cat(self.projections(hidden_states), dim=-1)


class JinaBertAttention(BertAttention):
    """BERT's attention (self, output); self adds the encoder's ALiBi bias."""

    self_attention_class = JinaBertSelfAttention


class JinaBertGLUMLP(nn.Module):
    """The original's JinaBertGLUMLP: layernorm(wo(act(gated) * non_gated) + x), gated|non_gated = gated_layers(x)
    (no bias), act GELU for feed_forward_type "geglu", ReLU for "reglu"."""

    def __init__(self, config: JinaBertConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gated_layers = nn.Linear(config.hidden_size, config.intermediate_size * 2, bias=False)
        self.hidden_act = config.feed_forward_act  # by name too, for the module swap that restores `act`
        self.act = ACT2FN[config.feed_forward_act]
        self.wo = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        # Set by the module swap that installs a wo taking forward(x, residual=): the add runs inside its GEMM.
        self.fuses_residual = False
        self.gated_product: nn.Module | None = None  # act(gate) * up in one module, set by layers.onednn.optimize

    def forward(self, hidden_states: Tensor) -> Tensor:
        """(..., H) -> (..., H)."""
        if self.gated_product is not None:
            product = self.gated_product(hidden_states)
        else:
            gated, non_gated = self.gated_layers(hidden_states).split(self.intermediate_size, dim=-1)
            product = self.act(gated) * non_gated
        if self.fuses_residual and not self.training:
            return self.layernorm(self.wo(product, residual=hidden_states))
        return self.layernorm(self.wo(self.dropout(product)) + hidden_states)


class JinaBertLayer(nn.Module):
    """The original's JinaBertLayer with a gated feed-forward: attention, then mlp."""

    # Where its parts are, for the module swaps (bertlite.layers.roles): gated_layers gives gated|non_gated.
    roles = LayerRoles(
        attention="attention.self",
        query="attention.self.query",
        key="attention.self.key",
        value="attention.self.value",
        attention_output="attention.output.dense",
        intermediate="mlp.gated_layers",
        activation="mlp.act",
        output="mlp.wo",
        gated=True,
        residual_owners={"attention_output": "attention.output", "output": "mlp"},
    )

    def __init__(self, config: JinaBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = JinaBertAttention(config, attn_implementation)
        self.mlp = JinaBertGLUMLP(config)

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
        return self.mlp(attention_output), probs


class JinaBertQKPostNormAttention(JinaBertAttention):
    """jina-bert-v2-qk-post-norm's JinaBertAttention: BERT's, on the normalized query and key."""

    self_attention_class = JinaBertQKPostNormSelfAttention


class JinaBertQKPostNormGLUMLP(nn.Module):
    """jina-bert-v2-qk-post-norm's JinaBertGLUMLP: down_layer(up * act(gated)), up|gated = up_gated_layer(x) (no
    bias), act GELU for "geglu", ReLU for "reglu"; the layer adds the residual and norms."""

    def __init__(self, config: JinaBertConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.up_gated_layer = nn.Linear(config.hidden_size, config.intermediate_size * 2, bias=False)
        self.hidden_act = config.feed_forward_act  # by name too, for the module swap that restores `act`
        self.act = ACT2FN[config.feed_forward_act]
        self.down_layer = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Set by the module swap that installs a down_layer taking forward(x, residual=): the layer's residual
        # add then runs inside its GEMM. Inference only.
        self.fuses_residual = False
        self.gated_product: nn.Module | None = None  # act(gate) * up in one module, set by layers.onednn.optimize

    def forward(self, hidden_states: Tensor) -> Tensor:
        """(..., H) -> (..., H), plus hidden_states when fuses_residual (inference): the residual in the GEMM."""
        if self.gated_product is not None:
            product = self.gated_product(hidden_states)
        else:
            up, gated = self.up_gated_layer(hidden_states).split(self.intermediate_size, dim=-1)
            product = up * self.act(gated)
        if self.fuses_residual and not self.training:
            return self.down_layer(product, residual=hidden_states)
        return self.down_layer(self.dropout(product))


class JinaBertQKPostNormLayer(nn.Module):
    """jina-bert-v2-qk-post-norm's JinaBertLayer: h = layer_norm_1(x + attention(x)), then
    layer_norm_2(h + mlp(h))."""

    # Where its parts are, for the module swaps (bertlite.layers.roles): up_gated_layer gives up|gated.
    roles = LayerRoles(
        attention="attention.self",
        query="attention.self.query",
        key="attention.self.key",
        value="attention.self.value",
        attention_output="attention.output.dense",
        intermediate="mlp.up_gated_layer",
        activation="mlp.act",
        output="mlp.down_layer",
        gated=True,
        activated_first=False,
        residual_owners={"attention_output": "attention.output", "output": "mlp"},
    )

    def __init__(self, config: JinaBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = JinaBertQKPostNormAttention(config, attn_implementation)
        self.layer_norm_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layer_norm_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = JinaBertQKPostNormGLUMLP(config)

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
        if first_token_of is not None:
            hidden_states = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        residual = self.layer_norm_1(hidden_states + attention_output)
        if self.mlp.fuses_residual and not self.training:
            return self.layer_norm_2(self.mlp(residual)), probs
        return self.layer_norm_2(residual + self.mlp(residual)), probs


class JinaBertEncoder(BertEncoder):
    """The original's JinaBertEncoder: the layers (JinaBertQKPostNormLayer for the qk-post-norm variant), and the
    ALiBi bias they share."""

    layer_class = JinaBertLayer

    def __init__(self, config: JinaBertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        if config.qk_post_norm:
            self.layer_class = JinaBertQKPostNormLayer  # an instance attribute: BertEncoder builds from it
        super().__init__(config, attn_implementation)
        self.num_attention_heads = config.num_attention_heads

    def position_bias(self, hidden_states: Tensor, layout: PackedLayout | None) -> Tensor:
        """Each head's ALiBi bias, -slope_h * |key - query|, as the original's rebuild_alibi_tensor: float32 slopes
        times the distances, cast to the model's dtype.

        Args:
            hidden_states: the embeddings, (B, T, H) or packed (N, H).
            layout: the packed batch's layout; None for a padded batch.

        Returns:
            (1, nh, T, T), T the padded length or the layout's max_length; it serves every sequence.
        """
        length = hidden_states.shape[1] if layout is None else layout.max_length
        device = hidden_states.device
        positions = torch.arange(length, device=device)
        distance = torch.abs(positions[None, :] - positions[:, None])  # (T, T)
        slopes = torch.tensor(alibi_head_slopes(self.num_attention_heads), device=device) * -1  # float32, as there
        return (slopes[:, None, None] * distance).unsqueeze(0).to(hidden_states.dtype)  # (1, nh, T, T)


class JinaBertModel(BertModel):
    """The original's JinaBertModel: BertModel with JinaBERT's embeddings, layers, ALiBi bias and config."""

    config_class = JinaBertConfig
    embeddings_class = JinaBertEmbeddings
    encoder_class = JinaBertEncoder
    _as_config = family_config(JinaBertConfig)
