"""The unpadded path (bertlite.fast) against transformers, real tokens only."""

import pytest
import torch

from bertlite.fast import PACKED_ATTENTION, PackedLayout, forward_packed, fused_qkv
from tests.conftest import make_hf_model, random_batch, to_bertlite
from tests.helpers import PARITY_CONFIGS


def packed_inputs(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mask = batch["attention_mask"].bool()
    return batch["input_ids"][mask], batch["token_type_ids"][mask], mask.sum(1)


@pytest.mark.parametrize("name", sorted(PARITY_CONFIGS))
@pytest.mark.parametrize("strategy", sorted(PACKED_ATTENTION))
def test_packed_matches_transformers_on_real_tokens(name, strategy):
    hf = make_hf_model(attn="eager", **PARITY_CONFIGS[name])
    ours = to_bertlite(hf, attn="sdpa")
    batch = random_batch(hf.config, batch=4, seq=13)
    ids, types, lengths = packed_inputs(batch)
    hidden, layout = forward_packed(ours, ids, lengths, types, strategy)
    with torch.no_grad():
        reference = hf(**batch).last_hidden_state[batch["attention_mask"].bool()]
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-5)
    assert layout.positions.tolist() == [p for n in lengths.tolist() for p in range(n)]


def test_equal_lengths_need_no_padding():
    layout = PackedLayout.from_lengths(torch.tensor([5, 5, 5]), torch.float32)
    assert layout.attention_bias is None and layout.max_length == 5
    layout = PackedLayout.from_lengths(torch.tensor([5, 2]), torch.float32)
    assert layout.attention_bias.shape == (2, 1, 1, 5) and layout.padded_index.tolist() == [0, 1, 2, 3, 4, 5, 6]


def test_fused_qkv_shares_storage_and_keeps_state_dict():
    hf = make_hf_model()
    ours = to_bertlite(hf, attn="sdpa")
    keys_before = list(ours.state_dict())
    attention = ours.encoder.layer[0].attention.self
    weight, bias = fused_qkv(attention)
    hidden = attention.query.weight.shape[0]
    assert weight.shape == (3 * hidden, hidden) and bias.shape == (3 * hidden,)
    reference = hf.encoder.layer[0].attention.self
    for i, name in enumerate(("query", "key", "value")):
        linear = getattr(attention, name)
        assert linear.weight.data_ptr() == weight[i * hidden].data_ptr()  # views, not copies
        assert torch.equal(linear.weight, getattr(reference, name).weight)
    assert fused_qkv(attention)[0].data_ptr() == weight.data_ptr()  # the second call finds the fusion
    assert list(ours.state_dict()) == keys_before
    ours.load_state_dict(hf.state_dict())  # copies into the fused storage; still consistent
    assert torch.equal(attention.key.weight, hf.encoder.layer[0].attention.self.key.weight)


def test_bf16_packed_close_to_fp32():
    hf = make_hf_model()
    ours = to_bertlite(hf, attn="sdpa")
    batch = random_batch(hf.config, batch=4, seq=13)
    ids, types, lengths = packed_inputs(batch)
    fp32, _ = forward_packed(ours, ids, lengths, types)
    low, _ = forward_packed(ours.to(torch.bfloat16), ids, lengths, types)
    cosine = torch.nn.functional.cosine_similarity(low.float(), fp32, dim=-1)
    assert low.dtype == torch.bfloat16 and cosine.min() > 0.99


@pytest.mark.parametrize("onednn", [True, False])
def test_linear_with_and_without_onednn(onednn, monkeypatch):
    import bertlite.fast

    monkeypatch.setattr(bertlite.fast, "_onednn_dtypes", {torch.float32: onednn, torch.bfloat16: onednn})
    hf = make_hf_model(hidden_act="gelu")
    ours = to_bertlite(hf, attn="sdpa")
    batch = random_batch(hf.config, batch=4, seq=13)
    ids, types, lengths = packed_inputs(batch)
    hidden, _ = forward_packed(ours, ids, lengths, types)
    with torch.no_grad():
        reference = hf(**batch).last_hidden_state[batch["attention_mask"].bool()]
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-5)


def eager_reference(qkv: torch.Tensor, lengths: torch.Tensor, heads: int, scaling: float) -> torch.Tensor:
    """Packed attention from transformers' eager BERT attention, one sequence at a time (no mask needed)."""
    from transformers.models.bert.modeling_bert import eager_attention_forward

    hidden = qkv.shape[1] // 3
    outputs = []
    for part in qkv.split(lengths.tolist()):
        q, k, v = part.view(1, len(part), 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)  # 3 x (1, nh, n, hs)
        context, _ = eager_attention_forward(torch.nn.Module().eval(), q, k, v, None, scaling)  # (1, n, nh, hs)
        outputs.append(context.reshape(len(part), hidden))
    return torch.cat(outputs)


@pytest.mark.parametrize("lengths", [[5, 17, 30, 1], [40, 40, 40], [128, 3]])
def test_half_precision_bmm_attention_close_to_sdpa(lengths, monkeypatch):
    # bf16 attention up to HALF_BMM_MAX_LENGTH tokens takes the batched-GEMM path; its error
    # against a float32 reference (transformers' eager attention) must stay within a small
    # multiple of the SDPA path's.
    import bertlite.fast
    from bertlite.fast import PackedLayout, attention_padded

    torch.manual_seed(0)
    lengths = torch.tensor(lengths)
    qkv = torch.randn(int(lengths.sum()), 3 * 48) * 2
    reference = eager_reference(qkv, lengths, 4, 0.3)
    # the float32 path itself agrees with the reference, so it is not the reference's error that is measured
    torch.testing.assert_close(
        attention_padded(qkv, PackedLayout.from_lengths(lengths, torch.float32), 4, 0.3), reference
    )
    layout = PackedLayout.from_lengths(lengths, torch.bfloat16)
    via_bmm = attention_padded(qkv.bfloat16(), layout, 4, 0.3)
    monkeypatch.setattr(bertlite.fast, "HALF_BMM_MAX_LENGTH", 0)
    via_sdpa = attention_padded(qkv.bfloat16(), layout, 4, 0.3)
    assert not torch.equal(via_bmm, via_sdpa)  # two different kernels really ran
    bmm_error = (via_bmm.float() - reference).abs().max()
    sdpa_error = (via_sdpa.float() - reference).abs().max()
    assert via_bmm.dtype == torch.bfloat16 and bmm_error <= 3 * sdpa_error
