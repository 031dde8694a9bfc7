"""The unpadded inference path: real tokens only, packed into one (total_tokens, H) matrix.

Every Linear, LayerNorm and activation runs on the packed matrix, so no FLOP is
spent on padding; attention is the one step that needs sequences apart, and it
gets them by one of the named strategies below (the benchmark measures them).
Query, key and value are one GEMM over a fused weight that shares storage with
the three transformers-named parameters, so state_dict() keys do not change.
Inference only: nothing here is differentiable by design (no_grad callers).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bertlite.modeling import ACT2FN, BertLayer, BertModel, BertSelfAttention
from bertlite.validation import check_packed_inputs


@dataclass
class PackedLayout:
    """Where each sequence's tokens sit in the packed matrix and in a padded (B, T) grid."""

    lengths: Tensor  # (B,) real tokens per sequence
    starts: Tensor  # (B,) offset of each sequence in the packed matrix
    max_length: int  # T
    padded_index: Tensor  # (N,) packed row -> row of the (B * T) padded grid
    attention_bias: Tensor | None  # (B, 1, 1, T): 0 / dtype-min for padded keys; None if no padding
    sequence_index: Tensor  # (N,) packed row -> sequence number

    @classmethod
    def from_lengths(cls, lengths: Tensor, dtype: torch.dtype) -> PackedLayout:
        lengths = lengths.to(torch.long)
        batch, width = len(lengths), int(lengths.max())
        starts = torch.cumsum(lengths, 0) - lengths
        sequence_index = torch.repeat_interleave(torch.arange(batch, device=lengths.device), lengths)
        offset_in_sequence = torch.arange(int(lengths.sum()), device=lengths.device) - starts[sequence_index]
        padded_index = sequence_index * width + offset_in_sequence
        bias = None
        if bool((lengths != width).any()):
            keep = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]  # (B, T)
            bias = torch.zeros(batch, 1, 1, width, dtype=dtype, device=lengths.device)
            bias.masked_fill_(~keep[:, None, None, :], torch.finfo(dtype).min)
        return cls(lengths, starts, width, padded_index, bias, sequence_index)

    @property
    def positions(self) -> Tensor:
        """Position id of every packed token: 0, 1, ... within its sequence."""
        return self.padded_index - self.sequence_index * self.max_length


# --- attention over packed q, k, v: the strategies -------------------------------


def attention_padded(qkv: Tensor, layout: PackedLayout, heads: int, scaling: float) -> Tensor:
    """Scatter to a padded (B, nh, T, hs) grid for one SDPA call, gather the result back.
    The padding exists only here, for the cheap part of the layer.

    bf16/fp16 attention on CPU: up to HALF_BMM_MAX_LENGTH tokens, batched GEMMs on a
    head-major grid (_attention_half_bmm); longer, SDPA in float32, which on CPU is
    more accurate and profiled faster than SDPA's bf16 kernel.
    """
    n, three_h = qkv.shape
    hidden, batch, width = three_h // 3, len(layout.lengths), layout.max_length
    dtype = qkv.dtype
    if dtype in (torch.bfloat16, torch.float16) and qkv.device.type == "cpu":
        if width <= HALF_BMM_MAX_LENGTH:
            return _attention_half_bmm(qkv, layout, heads, scaling)
        qkv = qkv.float()
    bias = layout.attention_bias
    if bias is None:
        grid = qkv  # every sequence is full length: packed is already the grid
    else:
        grid = qkv.new_zeros(batch * width, three_h).index_copy_(0, layout.padded_index, qkv)
        bias = bias.to(qkv.dtype)
    q, k, v = grid.view(batch, width, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scaling)
    context = context.transpose(1, 2).reshape(batch * width, hidden)  # (B * T, H)
    if bias is not None:
        context = context.index_select(0, layout.padded_index)
    return context.to(dtype)


# Measured on the corpus's length-sorted batches (2 threads, bf16): at 19-84 tokens
# the batched GEMMs take 30-45% less time than SDPA's CPU kernel, whose per-(sequence,
# head) overhead dominates at these sizes; at 256 tokens they take 40% more.
HALF_BMM_MAX_LENGTH = 128


def _attention_half_bmm(qkv: Tensor, layout: PackedLayout, heads: int, scaling: float) -> Tensor:
    """Attention as two batched GEMMs over (B * nh) contiguous matrices."""
    n, three_h = qkv.shape
    hidden, batch, width = three_h // 3, len(layout.lengths), layout.max_length
    head_size = hidden // heads
    sequence, position = layout.sequence_index, layout.positions
    # Scatter straight into head-major order, so q, k and v need no copy to be contiguous.
    grid = qkv.new_zeros(3, batch, heads, width, head_size)
    grid.permute(1, 3, 0, 2, 4)[sequence, position] = qkv.view(n, 3, heads, head_size)
    q, k, v = (part.view(batch * heads, width, head_size) for part in grid)  # 3 x (B * nh, T, hs)
    bias = layout.attention_bias
    if bias is None:
        scores = torch.bmm(q, k.transpose(1, 2)).mul_(scaling)
    else:
        bias = bias.to(qkv.dtype).expand(batch, heads, width, width).reshape(batch * heads, width, width)
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scaling)  # (B * nh, T, T)
    probs = _softmax_half(scores)
    context = torch.bmm(probs, v).view(batch, heads, width, head_size)
    return context.permute(0, 2, 1, 3)[sequence, position].reshape(n, hidden)  # (N, H)


def _softmax_half(scores: Tensor) -> Tensor:
    """Softmax over the last dim of bf16/fp16 scores, accumulated in float32 either way.

    torch's CPU kernels differ by row length (micro-benchmark, 24k rows): the half
    kernel is up to 5x slower when a row leaves a long tail past its 32-wide vectors
    (30 tokens: 2.5 ms vs 0.47 ms at 32), the float32 kernel is slow below 16. Both
    routes compute in float32 and round once; they differ by one bf16 ulp on about
    1e-5 of the elements.
    """
    width = scores.shape[-1]
    if width >= 16 and width % 32 > 4:
        return torch.softmax(scores.float(), dim=-1).to(scores.dtype)
    return torch.softmax(scores, dim=-1)


def attention_per_sequence(qkv: Tensor, layout: PackedLayout, heads: int, scaling: float) -> Tensor:
    """One SDPA call per sequence on its own slice: no padding at all, one call each."""
    hidden = qkv.shape[1] // 3
    out = torch.empty(qkv.shape[0], hidden, dtype=qkv.dtype, device=qkv.device)
    for start, length in zip(layout.starts.tolist(), layout.lengths.tolist(), strict=True):
        q, k, v = qkv[start : start + length].view(length, 3, heads, hidden // heads).permute(1, 2, 0, 3)
        context = F.scaled_dot_product_attention(q, k, v, scale=scaling)  # (nh, L, hs)
        out[start : start + length] = context.transpose(0, 1).reshape(length, hidden)
    return out


def attention_nested(qkv: Tensor, layout: PackedLayout, heads: int, scaling: float) -> Tensor:
    """torch.nested jagged tensors: SDPA over variable lengths without a Python loop."""
    hidden = qkv.shape[1] // 3
    offsets = torch.cat([layout.starts, layout.starts[-1:] + layout.lengths[-1:]])
    parts = []
    for i in range(3):
        values = qkv[:, i * hidden : (i + 1) * hidden].reshape(-1, heads, hidden // heads).contiguous()
        nested = torch.nested.nested_tensor_from_jagged(values, offsets)  # (B, j, nh, hs)
        parts.append(nested.transpose(1, 2))  # (B, nh, j, hs)
    with warnings.catch_warnings():  # torch's own "nested tensors are a prototype" notice, every call
        warnings.simplefilter("ignore", UserWarning)
        context = F.scaled_dot_product_attention(*parts, scale=scaling)
    return context.transpose(1, 2).values().reshape(-1, hidden)


PACKED_ATTENTION = {
    "padded": attention_padded,
    "per_sequence": attention_per_sequence,
    "nested": attention_nested,
}
DEFAULT_PACKED_ATTENTION = "padded"  # fastest here; scripts/bench.py --configs attention measures all


# --- the packed forward ----------------------------------------------------------


def fused_qkv(attention: BertSelfAttention) -> tuple[Tensor, Tensor]:
    """(3H, H) weight and (3H,) bias for one GEMM.

    The first call moves query/key/value into one buffer and re-points the three
    parameters at slices of it, so the fusion costs no memory and the
    transformers-named parameters (and state_dict keys) stay what they were.
    """
    weights = [attention.query.weight, attention.key.weight, attention.value.weight]
    biases = [attention.query.bias, attention.key.bias, attention.value.bias]
    fused = [_contiguous_base(weights), _contiguous_base(biases)]
    for i, (params, base) in enumerate(((weights, fused[0]), (biases, fused[1]))):
        if base is None:
            # Outside inference mode even when called from it: the parameters must
            # stay ordinary tensors, or the model could never be trained afterwards.
            with torch.inference_mode(False), torch.no_grad():
                base = torch.cat([p.detach() for p in params])
                rows = params[0].shape[0]
                for j, p in enumerate(params):
                    p.data = base[j * rows : (j + 1) * rows]
            fused[i] = base
    return fused[0], fused[1]


def _contiguous_base(params: list[Tensor]) -> Tensor | None:
    """A view spanning the three parameters, if they lie back to back in one storage."""
    first = params[0].detach()
    step = first.numel()
    for i, p in enumerate(params):
        if (
            p.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
            or not p.is_contiguous()
            or p.storage_offset() != first.storage_offset() + i * step
        ):
            return None
    shape = (len(params) * first.shape[0], *first.shape[1:])
    return first.as_strided(shape, torch.empty(shape, device="meta").stride(), first.storage_offset())


# --- linear layers: oneDNN when this torch build has it ----------------------------
# torch.ops.mkldnn._linear_pointwise is the op torch.compile emits for CPU linears:
# on the plain weight (no packed copy, so no extra memory) it is faster than
# F.linear here and fuses the activation into the GEMM's epilogue (measured:
# +5% fp32, +7% bf16 end to end). It is a private op, so it is probed once and
# any failure falls back to F.linear + ACT2FN.
_FUSED_ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_pytorch_tanh": ("gelu", "tanh"), "relu": ("relu", "")}
_onednn_dtypes: dict[torch.dtype, bool] = {}


def _onednn_ok(x: Tensor) -> bool:
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16):
        return False
    if x.dtype not in _onednn_dtypes:
        try:
            probe = torch.ones(2, 3, dtype=x.dtype)
            out = torch.ops.mkldnn._linear_pointwise(probe, torch.ones(4, 3, dtype=x.dtype), None, "none", [], "")
            _onednn_dtypes[x.dtype] = bool(torch.equal(out, torch.full((2, 4), 3.0, dtype=x.dtype)))
        except (AttributeError, RuntimeError):
            _onednn_dtypes[x.dtype] = False
    return _onednn_dtypes[x.dtype]


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None = None) -> Tensor:
    """activation(x @ weight.T + bias), the activation fused into the GEMM when possible."""
    if _onednn_ok(x):
        attr, algorithm = _FUSED_ACTIVATIONS.get(activation, ("none", ""))
        out = torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)
        return out if attr != "none" or activation is None else ACT2FN[activation](out)
    out = F.linear(x, weight, bias)
    return out if activation is None else ACT2FN[activation](out)


def linear_add(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor) -> Tensor:
    """x @ weight.T + bias + residual, the residual added in the GEMM's epilogue when possible:
    one pass less over the output and, in bf16, one rounding instead of two."""
    if _onednn_ok(x) and _onednn_add_ok(x.dtype):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")
    return linear(x, weight, bias) + residual


_onednn_add_dtypes: dict[torch.dtype, bool] = {}


def _onednn_add_ok(dtype: torch.dtype) -> bool:
    if dtype not in _onednn_add_dtypes:
        try:
            ones = torch.ones(2, 3, dtype=dtype)
            weight = torch.ones(2, 3, dtype=dtype)
            out = torch.ops.mkldnn._linear_pointwise.binary(ones, ones[:, :2], weight, None, "add")
            _onednn_add_dtypes[dtype] = bool(torch.equal(out, torch.full((2, 2), 4.0, dtype=dtype)))
        except (AttributeError, RuntimeError):
            _onednn_add_dtypes[dtype] = False
    return _onednn_add_dtypes[dtype]


def layer_forward_packed(layer: BertLayer, hidden: Tensor, layout: PackedLayout, strategy: str) -> Tensor:
    attention = layer.attention.self
    weight, bias = fused_qkv(attention)
    qkv = linear(hidden, weight, bias)  # (N, 3H): one GEMM instead of three
    context = PACKED_ATTENTION[strategy](qkv, layout, attention.num_attention_heads, attention.scaling)
    out = layer.attention.output
    attention_output = out.LayerNorm(linear_add(context, out.dense.weight, out.dense.bias, hidden))
    dense = layer.intermediate.dense
    intermediate = linear(attention_output, dense.weight, dense.bias, layer.intermediate.hidden_act)
    out = layer.output
    return out.LayerNorm(linear_add(intermediate, out.dense.weight, out.dense.bias, attention_output))


def supports_packed(model: BertModel) -> bool:
    """Whether the packed layers compute this model. They know only padding masks and absolute
    positions: relative positions need each sequence's (T, T) distance grid, a decoder a causal mask."""
    return model.config.position_embedding_type == "absolute" and not model.config.is_decoder


def _forward_padded(model: BertModel, input_ids: Tensor, token_type_ids: Tensor, layout: PackedLayout) -> Tensor:
    """The regular padded forward, re-packed: the fallback for models the packed layers cannot run."""
    batch, width = len(layout.lengths), layout.max_length
    grid_ids = input_ids.new_zeros(batch * width).index_copy_(0, layout.padded_index, input_ids)
    grid_types = token_type_ids.new_zeros(batch * width).index_copy_(0, layout.padded_index, token_type_ids)
    mask = torch.arange(width, device=input_ids.device)[None, :] < layout.lengths[:, None]  # (B, T)
    out = model(
        input_ids=grid_ids.view(batch, width),
        attention_mask=mask.long(),
        token_type_ids=grid_types.view(batch, width),
        return_dict=True,
    )
    return out.last_hidden_state.reshape(batch * width, -1).index_select(0, layout.padded_index)  # (N, H)


@torch.inference_mode()
def forward_packed(
    model: BertModel,
    input_ids: Tensor,
    lengths: Tensor,
    token_type_ids: Tensor | None = None,
    strategy: str = DEFAULT_PACKED_ATTENTION,
) -> tuple[Tensor, PackedLayout]:
    """last_hidden_state of the real tokens, (total_tokens, H), and the layout.

    input_ids / token_type_ids: (total_tokens,) — the sequences concatenated;
    lengths: (B,) tokens per sequence. Models the packed layers cannot run (supports_packed)
    go through the regular padded forward instead: same result, without the speed-up.
    """
    if strategy not in PACKED_ATTENTION:
        raise ValueError(f"strategy={strategy!r} is not one of {sorted(PACKED_ATTENTION)}")
    check_packed_inputs(model.config, input_ids, lengths, token_type_ids)
    embeddings = model.embeddings
    layout = PackedLayout.from_lengths(lengths, embeddings.word_embeddings.weight.dtype)
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    if not supports_packed(model):
        return _forward_padded(model, input_ids, token_type_ids, layout), layout
    # Same op order as BertEmbeddings.forward, so real tokens get the same numbers.
    hidden = embeddings.word_embeddings(input_ids) + embeddings.token_type_embeddings(token_type_ids)
    hidden = embeddings.LayerNorm(hidden + embeddings.position_embeddings(layout.positions))
    for layer in model.encoder.layer:
        hidden = layer_forward_packed(layer, hidden, layout, strategy)
    return hidden, layout
