"""DeBERTa-v2/v3: transformers' DebertaV2Model under its names, padded and packed.

The layer is BERT's post-norm layer (attention.self, attention.output, intermediate, output) whose self-attention
is disentangled: besides content-to-content scores it adds content-to-position (c2p: queries against the relative
position table's keys) and position-to-content (p2c: keys against its queries) terms, each gathered at the
log-bucketed distance between the two tokens, all divided by sqrt(head_dim * (1 + the number of terms)). The
table is `encoder.rel_embeddings` (LayerNorm'd when norm_rel_ebd says layer_norm), projected by each layer's
pos_key_proj / pos_query_proj, or its key_proj / query_proj when share_att_key. "eager" runs transformers' op
order (bitwise equal in float32); every other name runs SDPA with the relative terms in its additive mask. A packed
batch runs its Linears over all its rows and projects the table once per layer; only the attention core runs per run
of equal-length sequences (SDPA per sequence), each sequence attending on its own rows (its relative positions
counted from its first token). The heads are in models.deberta_v2_heads.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.config.bert import as_bert_config
from bertlite.config.deberta_v2 import DebertaV2Config
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import DEFAULT_ATTENTION, check_attn_implementation
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.models.encoder import EncoderPreTrainedModel
from bertlite.models.inputs import check_forward_kwargs, check_inputs
from bertlite.models.outputs import BaseModelOutputWithPooling


def _as_config(config: Any) -> DebertaV2Config:
    """A bertlite DebertaV2Config for a bertlite or transformers config."""
    return as_bert_config(config, DebertaV2Config)


# --- relative positions ----------------------------------------------------------


def log_bucket_positions(relative: Tensor, buckets: int, max_position: int) -> Tensor:
    """Relative distances kept as they are up to buckets // 2 each way, log-spaced beyond, as DeBERTa buckets them.

    Args:
        relative: (..., T, T) long query position minus key position.
        buckets: position_buckets.
        max_position: max_relative_positions; the distance the last bucket reaches.

    Returns:
        The bucketed distances, float.
    """
    sign = torch.sign(relative)
    mid = buckets // 2
    near = (relative < mid) & (relative > -mid)
    # Near distances are replaced by mid - 1 only so the log below stays finite; they keep their own value.
    far = torch.where(near, torch.tensor(mid - 1).type_as(relative), torch.abs(relative))
    span = torch.log(torch.tensor((max_position - 1) / mid))
    logged = torch.ceil(torch.log(far / mid) / span * (mid - 1)) + mid
    return torch.where(far <= mid, relative.type_as(logged), logged * sign)


def relative_positions(length: int, config: DebertaV2Config, device: torch.device) -> Tensor:
    """(T, T) long relative positions (query minus key), log-bucketed when position_buckets > 0."""
    ids = torch.arange(length, dtype=torch.long, device=device)
    relative = ids[:, None] - ids[None, :]
    if config.position_buckets > 0 and config.max_relative_distance > 0:
        relative = log_bucket_positions(relative, config.position_buckets, config.max_relative_distance)
    return relative.to(torch.long)


# --- modules -----------------------------------------------------------------


class DebertaV2Embeddings(nn.Module):
    """DeBERTa-v2's embeddings: word, position (position_biased_input) and token type (type_vocab_size > 0)
    embeddings summed, LayerNorm, padding rows zeroed, dropout."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_biased_input = config.position_biased_input
        self.position_embeddings = (
            nn.Embedding(config.max_position_embeddings, config.hidden_size) if config.position_biased_input else None
        )
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size > 0 else None
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor,
        mask: Tensor | None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """(B, T) or packed (N,) ids (or inputs_embeds) to (..., H); mask (B, T): padding rows come out zero."""
        embeddings = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if self.position_embeddings is not None:
            embeddings = embeddings + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros(embeddings.shape[:-1], dtype=torch.long, device=embeddings.device)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        embeddings = self.LayerNorm(embeddings)
        if mask is not None:
            embeddings = embeddings * mask.unsqueeze(-1).to(embeddings.dtype)
        return self.dropout(embeddings)


class DisentangledSelfAttention(nn.Module):
    """transformers' DisentangledSelfAttention: query_proj, key_proj, value_proj and the relative-position
    projections (pos_key_proj for c2p, pos_query_proj for p2c, unless share_att_key)."""

    def __init__(self, config: DebertaV2Config, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        hidden = config.hidden_size
        self.query_proj = nn.Linear(hidden, hidden)
        self.key_proj = nn.Linear(hidden, hidden)
        self.value_proj = nn.Linear(hidden, hidden)
        self.share_att_key = config.share_att_key
        self.pos_att_type = tuple(config.pos_att_type or ())
        self.relative_attention = config.relative_attention
        self.att_span = config.relative_span
        if config.relative_attention:
            self.pos_dropout = nn.Dropout(config.hidden_dropout_prob)
            if not self.share_att_key:
                if "c2p" in self.pos_att_type:
                    self.pos_key_proj = nn.Linear(hidden, hidden)
                if "p2c" in self.pos_att_type:
                    self.pos_query_proj = nn.Linear(hidden, hidden)
        # One sqrt(head_dim) per score term pos_att_type names, as DeBERTa scales them (relative_attention or not).
        self.scale_factor = 1 + len(self.pos_att_type)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.attn_implementation = check_attn_implementation(attn_implementation)
        # query|key|value as one module (FusedQKV), installed by the module swaps (layers.onednn, jobs.prepare); the
        # three Linears stay, for the keys and for share_att_key's projections of the position table.
        self.qkv: nn.Module | None = None

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, H) -> contiguous (B, nh, T, hs), the layout DeBERTa's batched matmuls run on."""
        batch, length = x.shape[:2]
        return x.view(batch, length, self.num_attention_heads, -1).permute(0, 2, 1, 3).contiguous()

    def forward(
        self,
        hidden_states: Tensor,
        mask: Tensor | None,
        relative_pos: Tensor | None,
        rel_embeddings: Tensor | None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """The context of a padded batch, or of a packed one whose sequences each attend on their own.

        Args:
            hidden_states: (B, T, H), or packed (N, H) rows.
            mask: (B, 1, T, T) bool (True: attend); None: nothing masked (always, packed).
            relative_pos: (1, T, T) long relative positions of the longest sequence (a shorter one reads its
                corner); None without relative attention.
            rel_embeddings: the relative position table (2S, H); None without relative attention.
            output_attentions: also return the probabilities.
            layout: the packed batch's PackedLayout; None: padded.

        Returns:
            The (B, T, H) context (packed: (N, H)) and, when asked, the (B, nh, T, T) probabilities (a packed
            batch's on the padded grid, zeros past each text).
        """
        if self.qkv is None:
            projections = self.query_proj(hidden_states), self.key_proj(hidden_states), self.value_proj(hidden_states)
        else:
            projections = self.qkv(hidden_states).split(hidden_states.shape[-1], dim=-1)
        scale = torch.sqrt(torch.tensor(self.attention_head_size, dtype=torch.float) * self.scale_factor)
        positions = self._position_heads(rel_embeddings) if self.relative_attention else (None, None)
        if layout is not None:
            return self._packed(projections, layout, relative_pos, positions, scale, output_attentions)
        query, key, value = (self._heads(p) for p in projections)
        return self._attend(query, key, value, mask, relative_pos, positions, scale, output_attentions)

    def _packed(
        self,
        projections: tuple[Tensor, ...],
        layout: PackedLayout,
        relative_pos: Tensor | None,
        positions: tuple[Tensor | None, Tensor | None],
        scale: Tensor,
        output_attentions: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """The attention core of each run of equal-length sequences (layout.runs) on its own rows.

        A run of n sequences of length L is one (n, L) grid without padding; every step of the core treats each
        of its sequences apart (a matrix per sequence and head; SDPA one call per sequence), so a sequence gets
        the same bits whatever shares its batch. Each run reads only the 2L - 1 rows of the projected position
        table its distances reach.

        Args:
            projections: query, key and value, 3 x (N, H).
            layout: the batch's PackedLayout.
            relative_pos: (1, T, T) relative positions of the longest sequence; None without relative attention.
            positions: the projected position table's keys and queries (_position_heads).
            scale: sqrt(head_dim * (1 + the number of relative terms)).
            output_attentions: also return the probabilities.

        Returns:
            The (N, H) context and, when asked, the (B, nh, T, T) probabilities on the padded grid.
        """
        context = projections[0].new_empty(projections[0].shape)  # (N, H)
        probs = None
        if output_attentions:  # each text's probabilities on the padded grid, as the other families give them
            width = layout.max_length
            probs = context.new_zeros(layout.batch_size, self.num_attention_heads, width, width)  # (B, nh, T, T)
        span, sequence = self.att_span, 0
        for start, count, length in layout.runs:
            rows = slice(start, start + count * length)
            shape = (count, length, self.num_attention_heads, self.attention_head_size)
            query, key, value = (p[rows].view(shape).transpose(1, 2) for p in projections)  # 3 x (n, nh, L, hs) views
            own = None if relative_pos is None else relative_pos[..., :length, :length]
            # The table rows the run's distances reach: span - (L - 1) to span + (L - 1), clamped as the index is.
            first, last = max(0, span - length + 1), min(2 * span, span + length)
            window = tuple(None if p is None else p[:, first:last] for p in positions)
            attended, own_probs = self._attend(
                query, key, value, None, own, window, scale, output_attentions, first, one_by_one=True
            )
            context[rows] = attended.view(count * length, -1)  # (n * L, H)
            if probs is not None:
                probs[sequence : sequence + count, :, :length, :length] = own_probs
            sequence += count
        return context, probs

    def _attend(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None,
        relative_pos: Tensor | None,
        positions: tuple[Tensor | None, Tensor | None],
        scale: Tensor,
        output_attentions: bool,
        first: int = 0,
        one_by_one: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """The attention core: scores with their relative terms, softmax, the context.

        Args:
            query, key, value: (B, nh, T, hs), any strides (the batched matmuls of the relative terms and of
                "eager" run on contiguous copies, SDPA on them as they are).
            mask: (B, 1, T, T) bool (True: attend); None: nothing masked.
            relative_pos: (1, T, T) long relative positions; None without relative attention.
            positions: the projected position table's keys and queries, (nh, W, hs) or None each.
            scale: sqrt(head_dim * (1 + the number of relative terms)).
            output_attentions: also return the probabilities.
            first: the table row `positions` start at.
            one_by_one: SDPA on each sequence alone (the scores, the matmuls of "eager" and of the relative terms
                are per sequence and head in any case).

        Returns:
            The (B, T, H) context and, when asked, the (B, nh, T, T) probabilities.
        """
        batch, _, length, head_size = query.shape
        eager = output_attentions or self.attn_implementation == "eager"
        relative = None
        if self.relative_attention or eager:
            flat_query, flat_key = query.reshape(-1, length, head_size), key.reshape(-1, length, head_size)
        if self.relative_attention:
            relative = self._relative_scores(flat_query, flat_key, relative_pos, positions, scale, first)
        if eager:
            scores = torch.bmm(flat_query, flat_key.transpose(-1, -2) / scale.to(dtype=query.dtype))  # (B*nh, T, T)
            if relative is not None:
                scores = scores + relative
            scores = scores.view(batch, -1, length, length)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(query.dtype).min)
            probs = self.dropout(F.softmax(scores, dim=-1))
            context = torch.bmm(probs.view(-1, length, length), value.reshape(-1, length, head_size))  # (B*nh, T, hs)
            context = context.view(batch, -1, length, head_size)
        else:
            bias = None if relative is None else relative.view(batch, -1, length, length)
            if mask is not None:
                padding = torch.zeros(mask.shape, dtype=query.dtype, device=query.device)
                padding = padding.masked_fill_(~mask, torch.finfo(query.dtype).min)
                bias = padding if bias is None else bias + padding
            sdpa = functools.partial(
                F.scaled_dot_product_attention,
                dropout_p=self.dropout.p if self.training else 0.0,
                scale=1.0 / math.sqrt(self.attention_head_size * self.scale_factor),
            )
            if one_by_one:
                # torch's CPU kernel splits a batch's work by its size: a sequence's own call keeps its bits.
                context = query.new_empty(batch, length, self.num_attention_heads, head_size)  # (B, T, nh, hs)
                for i in range(batch):
                    own_bias = None if bias is None else bias[i : i + 1]
                    attended = sdpa(query[i : i + 1], key[i : i + 1], value[i : i + 1], attn_mask=own_bias)
                    context[i] = attended[0].transpose(0, 1)
                context = context.transpose(1, 2)  # (B, nh, T, hs)
            else:
                context = sdpa(query, key, value, attn_mask=bias)
            probs = None
        context = context.permute(0, 2, 1, 3).contiguous()  # (B, T, nh, hs)
        return context.view(batch, length, -1), probs if output_attentions else None  # (B, T, H)

    def _position_heads(self, rel_embeddings: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The relative position table projected to keys (for c2p) and queries (for p2c), once per forward.

        Args:
            rel_embeddings: the relative position table (2S, H).

        Returns:
            (nh, 2S, hs) keys and queries; None for a term pos_att_type does not name.
        """
        table = self.pos_dropout(rel_embeddings)[: self.att_span * 2].unsqueeze(0)  # (1, 2S, H)
        shared = None
        if self.share_att_key and self.qkv is not None:
            # int8 leaves only placeholders where query_proj and key_proj were: the table goes through q|k|v too.
            shared = self.qkv(table[0]).unsqueeze(0).split(table.shape[-1], dim=-1)  # 3 x (1, 2S, H)
        pos_key = pos_query = None
        if "c2p" in self.pos_att_type:
            proj = self.key_proj if self.share_att_key else self.pos_key_proj
            pos_key = self._heads(proj(table) if shared is None else shared[1])[0]  # (nh, 2S, hs)
        if "p2c" in self.pos_att_type:
            proj = self.query_proj if self.share_att_key else self.pos_query_proj
            pos_query = self._heads(proj(table) if shared is None else shared[0])[0]  # (nh, 2S, hs)
        return pos_key, pos_query

    def _relative_scores(
        self,
        query: Tensor,
        key: Tensor,
        relative_pos: Tensor,
        positions: tuple[Tensor | None, Tensor | None],
        scale: Tensor,
        first: int = 0,
    ) -> Tensor | int:
        """The c2p and p2c terms, (B*nh, T, T), each divided by scale (0 when pos_att_type names neither).

        Args:
            query, key: (B * nh, T, hs).
            relative_pos: (1, T, T) long relative positions.
            positions: the projected position table's keys and queries, (nh, W, hs) or None each.
            scale: the divisor of each term.
            first: the table row `positions` start at (its rows cover every distance of the T tokens).

        Returns:
            The summed terms, or 0.
        """
        span = self.att_span
        repeat = query.shape[0] // self.num_attention_heads
        index_shape = [query.shape[0], query.shape[1], key.shape[1]]
        pos_key, pos_query = positions
        score: Tensor | int = 0
        if pos_key is not None:
            c2p = torch.bmm(query, pos_key.repeat(repeat, 1, 1).transpose(-1, -2))  # (B*nh, T, W)
            index = torch.clamp(relative_pos + span, 0, span * 2 - 1)
            index = (index - first if first else index).expand(index_shape)
            c2p = torch.gather(c2p, dim=-1, index=index)
            score = score + c2p / scale.to(dtype=c2p.dtype)
        if pos_query is not None:
            p2c = torch.bmm(key, pos_query.repeat(repeat, 1, 1).transpose(-1, -2))  # (B*nh, T, W)
            index = torch.clamp(-relative_pos + span, 0, span * 2 - 1)
            index = (index - first if first else index).expand(index_shape)
            p2c = torch.gather(p2c, dim=-1, index=index).transpose(-1, -2)
            score = score + p2c / scale.to(dtype=p2c.dtype)
        return score


class DebertaV2SelfOutput(nn.Module):
    """transformers' DebertaV2SelfOutput: LayerNorm(dropout(dense(x)) + input)."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class DebertaV2Attention(nn.Module):
    """transformers' DebertaV2Attention: `self` (disentangled) and `output`."""

    def __init__(self, config: DebertaV2Config, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.self = DisentangledSelfAttention(config, attn_implementation)
        self.output = DebertaV2SelfOutput(config)

    def forward(
        self,
        hidden_states: Tensor,
        mask: Tensor | None,
        relative_pos: Tensor | None,
        rel_embeddings: Tensor | None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        context, probs = self.self(hidden_states, mask, relative_pos, rel_embeddings, output_attentions, layout)
        return self.output(context, hidden_states), probs


class DebertaV2Intermediate(nn.Module):
    """transformers' DebertaV2Intermediate: act(dense(x))."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that restores the activation
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class DebertaV2Output(DebertaV2SelfOutput):
    """transformers' DebertaV2Output: LayerNorm(dropout(dense(x)) + input), from intermediate_size."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__(config)
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)


class DebertaV2Layer(nn.Module):
    """transformers' DebertaV2Layer: attention, intermediate, output."""

    # Where its parts are, for the code that finds a layer's attention and Linears (bertlite.layers.roles).
    roles = LayerRoles(
        attention="attention.self",
        query="attention.self.query_proj",
        key="attention.self.key_proj",
        value="attention.self.value_proj",
        attention_output="attention.output.dense",
        intermediate="intermediate.dense",
        activation="intermediate.intermediate_act_fn",
        output="output.dense",
    )

    def __init__(self, config: DebertaV2Config, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = DebertaV2Attention(config, attn_implementation)
        self.intermediate = DebertaV2Intermediate(config)
        self.output = DebertaV2Output(config)

    def forward(
        self,
        hidden_states: Tensor,
        mask: Tensor | None,
        relative_pos: Tensor | None,
        rel_embeddings: Tensor | None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """(B, T, H), or packed (N, H) rows with their layout (each sequence attends on its own)."""
        attended, probs = self.attention(hidden_states, mask, relative_pos, rel_embeddings, output_attentions, layout)
        return self.output(self.intermediate(attended), attended), probs


class ConvLayer(nn.Module):
    """transformers' ConvLayer (deberta-v2-xlarge, -xxlarge): LayerNorm(first layer's output + act(conv(embeddings))),
    the convolution along each text's tokens, zeros past its ends."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        kernel = config.conv_kernel_size
        hidden = config.hidden_size
        self.conv = nn.Conv1d(hidden, hidden, kernel, padding=(kernel - 1) // 2, groups=config.conv_groups)
        self.LayerNorm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.conv_act = config.conv_act

    def forward(
        self, hidden_states: Tensor, residual_states: Tensor, input_mask: Tensor | None, layout: PackedLayout | None
    ) -> Tensor:
        """The first layer's output corrected by the convolution of the embeddings.

        Args:
            hidden_states: the embedding output, (B, T, H) or packed (N, H).
            residual_states: the first layer's output, the same shape.
            input_mask: (B, T), 1 for real tokens; None: every token real (always, packed).
            layout: the packed batch's PackedLayout; None: padded.

        Returns:
            The layer's new output, hidden_states' shape (padded: zeros at the padding, as transformers gives).
        """
        if layout is None:
            out = self.conv(hidden_states.permute(0, 2, 1).contiguous()).permute(0, 2, 1).contiguous()
            if input_mask is not None:
                out.masked_fill_((1 - input_mask).bool().unsqueeze(-1).expand(out.size()), 0)
        else:
            out = torch.empty_like(residual_states)
            # Each text convolved alone: its ends see zeros, as on the padded grid, whatever shares its batch.
            for start, length in zip(layout.starts.tolist(), layout.lengths.tolist(), strict=True):
                rows = hidden_states[start : start + length].T.contiguous()[None]  # (1, H, L)
                out[start : start + length] = self.conv(rows)[0].T
        out = ACT2FN[self.conv_act](self.dropout(out))
        normed = self.LayerNorm(residual_states + out)
        if input_mask is None:
            return normed
        return normed * input_mask.unsqueeze(2).to(normed.dtype)


class DebertaV2Encoder(nn.Module):
    """transformers' DebertaV2Encoder: the layers, the relative position table and its LayerNorm, and the
    convolution layer where conv_kernel_size > 0."""

    def __init__(self, config: DebertaV2Config, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.layer = nn.ModuleList(DebertaV2Layer(config, attn_implementation) for _ in range(config.num_hidden_layers))
        self.conv = ConvLayer(config) if config.conv_kernel_size > 0 else None
        self.relative_attention = config.relative_attention
        if config.relative_attention:
            self.rel_embeddings = nn.Embedding(config.relative_span * 2, config.hidden_size)
        self.norm_rel_ebd = [part.strip() for part in config.norm_rel_ebd.lower().split("|")]
        if "layer_norm" in self.norm_rel_ebd:
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def get_rel_embedding(self) -> Tensor | None:
        """The relative position table (2S, H), LayerNorm'd when norm_rel_ebd says layer_norm; None without it."""
        if not self.relative_attention:
            return None
        table = self.rel_embeddings.weight
        return self.LayerNorm(table) if "layer_norm" in self.norm_rel_ebd else table


# --- models --------------------------------------------------------------------


class DebertaV2PreTrainedModel(EncoderPreTrainedModel):
    """What every DeBERTa-v2 class shares: its config class, base model prefix "deberta", transformers' init."""

    config_class = DebertaV2Config
    base_model_prefix = "deberta"
    _as_config = staticmethod(_as_config)

    _attention_path = "attention.self"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """transformers' scheme (EncoderPreTrainedModel's), and a zero for the masked-LM heads' own output bias.

        Args:
            module: one module of the model (init_weights applies this to every module).
        """
        super()._init_weights(module)
        bias = getattr(module, "bias", None)
        if isinstance(bias, nn.Parameter) and not isinstance(module, (nn.Linear, nn.LayerNorm)):
            bias.zero_()


class DebertaV2Model(DebertaV2PreTrainedModel):
    """transformers' DebertaV2Model: embeddings and the encoder; padded or packed. It has no pooler (the heads'
    ContextPooler is theirs); add_pooling_layer is taken and ignored, as the other families' signature has it."""

    def __init__(
        self, config: DebertaV2Config, add_pooling_layer: bool = False, attn_implementation: str | None = None
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model, as BertModel's.
            add_pooling_layer: unused (DeBERTa's base model has no pooler).
            attn_implementation: a name of bertlite.layers.attention's registry ("eager": transformers' op order;
                any other: SDPA); None: the config's _attn_implementation, else "sdpa".

        Raises:
            ValueError: an unknown attention name.
        """
        super().__init__(config)
        config = self.config
        attn_implementation = self._attention_name(attn_implementation)
        self.embeddings = DebertaV2Embeddings(config)
        self.encoder = DebertaV2Encoder(config, attn_implementation)
        self.pooler = None
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
        """Run a padded batch, as transformers does, or a packed one (each sequence on its own); both run the same
        modules.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens; None: nothing masked. Not packed.
            token_type_ids: (B, T) or packed (N,); None: zeros. Ignored without token type embeddings
                (type_vocab_size 0), as transformers does.
            position_ids: (B, T) absolute positions (position_biased_input); None: 0..T-1. Not packed.
            inputs_embeds: (B, T, H) instead of input_ids (padded only).
            output_attentions: also return each layer's attention probabilities, (B, nh, T, T) (a packed batch's on
                the padded grid, zeros past each text); None: the config's.
            output_hidden_states: also return the embedding output and each layer's; None: the config's.
            return_dict: a BaseModelOutputWithPooling; False: its tuple; None: the config's.
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; last_hidden_state is then those sequences'
                first-token rows (R, H).
            **kwargs: what transformers' forward also takes and bertlite ignores; anything else is a TypeError.

        Returns:
            last_hidden_state (B, T, H) (packed: (N, H)), pooler_output None, hidden_states and attentions when
            asked.

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does not take.
            TypeError: an unknown keyword.
        """
        check_forward_kwargs(type(self).__name__, kwargs)
        cfg = self.config
        output_attentions, output_hidden_states = self._output_flags(output_attentions, output_hidden_states)
        if cfg.type_vocab_size == 0:
            token_type_ids = None  # no table to read them from, as transformers ignores them
        if self._is_packed(attention_mask, position_ids, inputs_embeds, lengths, layout, first_token_of):
            layout = self._packed_layout(input_ids, token_type_ids, lengths, layout, first_token_of, output_attentions)
            hidden_states = self.embeddings(input_ids, token_type_ids, layout.positions, None)
            out = self._run_layers(hidden_states, None, None, output_attentions, output_hidden_states, layout)
            if first_token_of is not None:
                out.last_hidden_state = out.last_hidden_state[layout.starts[first_token_of]]  # (R, H)
        else:
            check_inputs(cfg, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids)
            length = (input_ids if input_ids is not None else inputs_embeds[..., 0]).shape[-1]
            device = (input_ids if input_ids is not None else inputs_embeds).device
            if position_ids is None:
                position_ids = torch.arange(length, device=device).unsqueeze(0)  # (1, T)
            mask = None if attention_mask is None else attention_mask.to(device)
            hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, mask, inputs_embeds)
            pair_mask = None
            if mask is not None:
                keep = mask[:, None, None, :] * mask[:, None, :, None]  # (B, 1, T, T): query and key both real
                pair_mask = keep.bool()
            out = self._run_layers(hidden_states, pair_mask, mask, output_attentions, output_hidden_states, None)
        return self._returned(out, return_dict)

    def _run_layers(
        self,
        hidden_states: Tensor,
        mask: Tensor | None,
        input_mask: Tensor | None,
        output_attentions: bool,
        output_hidden_states: bool,
        layout: PackedLayout | None,
    ) -> BaseModelOutputWithPooling:
        """The layers, each given the relative positions and the relative position table, the convolution layer
        (where there is one) after the first; hidden_states and attentions as transformers records them (the
        embeddings, then each layer's output). mask: (B, 1, T, T) pairs that attend; input_mask: (B, T) real
        tokens (None, both: all, as packed)."""
        length = hidden_states.shape[1] if layout is None else int(layout.lengths.max())
        relative_pos = None
        if self.config.relative_attention:
            relative_pos = relative_positions(length, self.config, hidden_states.device)[None]  # (1, T, T)
        rel_embeddings = self.encoder.get_rel_embedding()

        def layer_args(i: int, layer: nn.Module) -> tuple[Any, ...]:
            return mask, relative_pos, rel_embeddings, output_attentions, layout

        layers: list[Any] = list(self.encoder.layer)
        conv, first = self.encoder.conv, layers[0] if layers else None
        if conv is not None and first is not None:

            def first_with_conv(embedded: Tensor, *args: Any) -> tuple[Tensor, Tensor | None]:
                out, probs = first(embedded, *args)
                return conv(embedded, out, input_mask, layout), probs

            layers[0] = first_with_conv
        out = self._layer_loop(hidden_states, layers, layer_args, output_attentions, output_hidden_states)
        return BaseModelOutputWithPooling(out[0], None, *out[1:])


# Gradient checkpointing runs in DebertaV2Model; set_attn_implementation reaches each layer's attention.
DebertaV2PreTrainedModel._checkpointed_module_types = (DebertaV2Model,)
DebertaV2PreTrainedModel._attention_module_types = (DisentangledSelfAttention,)
