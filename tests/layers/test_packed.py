"""Packed batches (real tokens only) through the one module tree, against transformers."""

import pytest
import torch

import bertlite
import bertlite.layers.attention
import bertlite.layers.onednn
from bertlite import Embedder
from bertlite.layers.attention import (
    PACKED_ATTENTION,
    PADDED_ATTENTION,
    packed_auto_attention,
    packed_half_bmm_attention,
    packed_sdpa_attention,
)
from bertlite.layers.packing import PackedLayout
from tests.helpers import PARITY_CONFIGS, make_hf_model, packed_inputs, random_batch, real_tokens, to_bertlite

# "varlen" on the CPU is bertlite's C++ attention (on CUDA flash attention: tests/jobs/test_prepare.py).
CPU_PACKED_ATTENTION = sorted(PACKED_ATTENTION)


@pytest.mark.parametrize("name", sorted(PARITY_CONFIGS))
@pytest.mark.parametrize("attn", CPU_PACKED_ATTENTION)
def test_packed_matches_transformers_on_real_tokens(name, attn):
    hf = make_hf_model(attn="eager", **PARITY_CONFIGS[name])
    ours = to_bertlite(hf, attn=attn)
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        out = ours(**packed_inputs(batch))
        reference = hf(**batch)
    torch.testing.assert_close(
        out.last_hidden_state, real_tokens(reference.last_hidden_state, batch), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(out.pooler_output, reference.pooler_output, atol=1e-5, rtol=1e-5)


def test_packed_eager_is_the_padded_eager_on_real_tokens():
    hf = make_hf_model(attn="eager")
    ours = to_bertlite(hf, attn="eager")
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        packed = ours(**packed_inputs(batch), output_hidden_states=True, output_attentions=True)
        padded = ours(**batch, output_hidden_states=True, output_attentions=True)
    assert len(packed.hidden_states) == len(padded.hidden_states) == hf.config.num_hidden_layers + 1
    for ours_layer, reference in zip(packed.hidden_states, padded.hidden_states, strict=True):
        torch.testing.assert_close(ours_layer, real_tokens(reference, batch), atol=1e-6, rtol=1e-6)
    # probabilities on the padded grid: the padded path's, where a real query attends
    keep = batch["attention_mask"].bool()[:, None, :, None]
    for ours_probs, reference in zip(packed.attentions, padded.attentions, strict=True):
        torch.testing.assert_close(ours_probs * keep, reference * keep, atol=1e-6, rtol=1e-6)


def test_layout_or_lengths_give_the_same_result_and_equal_lengths_need_no_padding():
    layout = PackedLayout.from_lengths(torch.tensor([5, 5, 5]))
    assert layout.attention_bias is None and layout.max_length == 5
    layout = PackedLayout.from_lengths(torch.tensor([5, 2]))
    assert layout.attention_bias.shape == (2, 1, 1, 5) and layout.padded_index.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert layout.positions.tolist() == [0, 1, 2, 3, 4, 0, 1]
    hf = make_hf_model()
    ours = to_bertlite(hf, attn="sdpa")
    inputs = packed_inputs(random_batch(hf.config, batch=3, seq=9))
    lengths = inputs.pop("lengths")
    with torch.no_grad():
        by_lengths = ours(**inputs, lengths=lengths).last_hidden_state
        by_layout = ours(**inputs, layout=PackedLayout.from_lengths(lengths)).last_hidden_state
    assert torch.equal(by_lengths, by_layout)


def test_embedder_honours_the_models_attn_implementation(monkeypatch):
    calls = {name: 0 for name in PACKED_ATTENTION}
    for name, fn in list(PACKED_ATTENTION.items()):

        def counted(*args, _name=name, _fn=fn):
            calls[_name] += 1
            return _fn(*args)

        monkeypatch.setitem(bertlite.layers.attention.PACKED_ATTENTION, name, counted)
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(99)}
    vocab["[PAD]"], vocab["[UNK]"] = 0, 1
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    model = to_bertlite(make_hf_model(), attn="sdpa")
    embedder = Embedder(model, tokenizer)
    texts = ["w1 w2 w3", "w4 w5", "w6"]
    fast = embedder.encode(texts)
    assert calls["auto"] == model.config.num_hidden_layers and calls["eager"] == 0  # Embedder optimized it
    model.set_attn_implementation("eager")
    reference = embedder.encode(texts)
    assert calls["eager"] == model.config.num_hidden_layers
    torch.testing.assert_close(torch.from_numpy(fast), torch.from_numpy(reference), atol=1e-6, rtol=0)


def test_packed_only_implementations_refuse_a_padded_batch():
    hf = make_hf_model()
    ours = to_bertlite(hf, attn="nested")
    with pytest.raises(ValueError, match="attn_implementation='nested' runs packed batches only"):
        ours(**random_batch(hf.config))
    assert set(PADDED_ATTENTION) < set(PACKED_ATTENTION)


def test_packed_batch_trains_like_the_padded_one():
    hf = make_hf_model()
    batch = random_batch(hf.config, batch=4, seq=13)
    grads = []
    for packed in (True, False):
        ours = to_bertlite(hf, attn="sdpa")
        out = ours(**packed_inputs(batch)) if packed else ours(**batch)
        hidden = out.last_hidden_state if packed else real_tokens(out.last_hidden_state, batch)
        (hidden.square().mean() + out.pooler_output.sum()).backward()
        grads.append({n: p.grad for n, p in ours.named_parameters()})
    assert grads[0]["encoder.layer.0.attention.self.query.weight"].abs().sum() > 0
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_bf16_packed_close_to_fp32():
    hf = make_hf_model()
    ours = to_bertlite(hf, attn="sdpa")
    inputs = packed_inputs(random_batch(hf.config, batch=4, seq=13))
    with torch.no_grad():
        fp32 = ours(**inputs).last_hidden_state
        low = ours.to(torch.bfloat16)(**inputs).last_hidden_state
    cosine = torch.nn.functional.cosine_similarity(low.float(), fp32, dim=-1)
    assert low.dtype == torch.bfloat16 and cosine.min() > 0.99


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
    # bf16 attention as batched GEMMs: its error against a float32 reference (transformers' eager
    # attention) must stay within a small multiple of SDPA's in float32 on the same bf16 inputs.
    torch.manual_seed(0)
    lengths = torch.tensor(lengths)
    qkv = torch.randn(int(lengths.sum()), 3 * 48) * 2
    reference = eager_reference(qkv, lengths, 4, 0.3)
    # the float32 path itself agrees with the reference, so it is not the reference's error that is measured
    torch.testing.assert_close(
        packed_sdpa_attention(qkv, PackedLayout.from_lengths(lengths), 4, 0.3, 0.0)[0], reference
    )
    layout = PackedLayout.from_lengths(lengths, torch.bfloat16)
    via_bmm = packed_half_bmm_attention(qkv.bfloat16(), layout, 4, 0.3, 0.0)[0]
    via_sdpa = packed_sdpa_attention(qkv.bfloat16().float(), layout, 4, 0.3, 0.0)[0].bfloat16()
    assert not torch.equal(via_bmm, via_sdpa)  # two different kernels really ran
    bmm_error = (via_bmm.float() - reference).abs().max()
    sdpa_error = (via_sdpa.float() - reference).abs().max()
    assert via_bmm.dtype == torch.bfloat16 and bmm_error <= 3 * sdpa_error


@pytest.mark.parametrize("lengths", [[40, 40, 40], [30, 30, 5, 5], [5, 17, 30, 1]])
def test_auto_runs_half_precision_runs_in_float32_per_run(lengths):
    # Runs of equal lengths (or a grid mostly padding, the last case): "auto" runs bf16 attention as
    # float32 SDPA per run on the bf16 inputs, rounded once, closer to the float32 reference than the
    # grid's batched GEMMs.
    torch.manual_seed(0)
    lengths = torch.tensor(lengths)
    qkv = (torch.randn(int(lengths.sum()), 3 * 48) * 2).bfloat16()
    reference = eager_reference(qkv.float(), lengths, 4, 0.3)
    layout = PackedLayout.from_lengths(lengths, torch.bfloat16)
    per_run = packed_auto_attention(qkv, layout, 4, 0.3, 0.0)[0]
    expected = bertlite.layers.attention.packed_per_sequence_attention(qkv.float(), layout, 4, 0.3, 0.0)[0].bfloat16()
    assert per_run.dtype == torch.bfloat16 and torch.equal(per_run, expected)
    via_grid = packed_half_bmm_attention(qkv, layout, 4, 0.3, 0.0)[0]
    assert (per_run.float() - reference).abs().max() <= (via_grid.float() - reference).abs().max()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(attention_mask=torch.ones(3, 4)), "attention_mask is not taken with a packed batch"),
        (dict(lengths=torch.tensor([2.0, 2.0])), "lengths must be a 1-D integer tensor"),
        (dict(lengths=torch.tensor([3, 2])), "lengths sum to 5, but input_ids has 4 tokens"),
        (dict(lengths=torch.tensor([4, 0])), "every packed sequence needs at least one token"),
        (dict(layout=PackedLayout.from_lengths(torch.tensor([4]))), "give lengths= or layout=, not both"),
    ],
)
def test_bad_packed_inputs_are_named(change, message):
    ours = to_bertlite(make_hf_model(), attn="sdpa")
    inputs = {"input_ids": torch.tensor([5, 6, 7, 8]), "lengths": torch.tensor([2, 2]), **change}
    with pytest.raises(ValueError, match=message):
        ours(**inputs)


@pytest.mark.parametrize("head", ["BertForTokenClassification", "BertForSequenceClassification", "BertForMaskedLM"])
def test_heads_take_packed_batches(head):
    hf = make_hf_model()
    fields = {k: v for k, v in hf.config.to_dict().items() if k not in ("id2label", "label2id")}
    config = bertlite.BertConfig.from_dict({**fields, "num_labels": 3})
    torch.manual_seed(0)
    model = getattr(bertlite, head)(config).eval()
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        packed = model(**packed_inputs(batch)).logits
        padded = model(**batch).logits
    expected = padded if head == "BertForSequenceClassification" else real_tokens(padded, batch)
    torch.testing.assert_close(packed, expected, atol=1e-5, rtol=1e-5)


def test_runs_of_equal_lengths_are_blocks_of_the_packed_rows():
    layout = PackedLayout.from_lengths(torch.tensor([4, 4, 4, 2, 5, 5, 1]))
    assert layout.runs == [(0, 3, 4), (12, 1, 2), (14, 2, 5), (24, 1, 1)]


@pytest.mark.parametrize("lengths", [[9, 9, 9, 4, 4, 1], [6, 2, 6, 2], [1, 1, 1]])
def test_per_sequence_attention_over_runs_matches_transformers_eager(lengths):
    lengths = torch.tensor(lengths)
    torch.manual_seed(0)
    qkv = torch.randn(int(lengths.sum()), 3 * 48)
    context, _ = bertlite.layers.attention.packed_per_sequence_attention(
        qkv, PackedLayout.from_lengths(lengths), 4, 0.3, 0
    )
    torch.testing.assert_close(context, eager_reference(qkv, lengths, 4, 0.3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_auto_gives_a_sequence_the_same_bits_whatever_shares_its_batch(dtype):
    torch.manual_seed(0)
    rows = {n: torch.randn(n, 3 * 48).to(dtype) for n in (30, 29, 7, 2, 1)}  # one sequence of each length
    alone = {
        n: packed_auto_attention(qkv, PackedLayout.from_lengths(torch.tensor([n])), 4, 0.3, 0.0)[0]
        for n, qkv in rows.items()
    }
    # a padded grid 4.4x the real tokens, runs of equal lengths, all lengths apart (grid 1.1x): the shapes that
    # once picked a padded grid or per-run calls by the batch
    for lengths in ([30, 2, 7, 1], [30, 30, 7, 7, 7], [30, 29, 7, 2], [1, 2, 7, 29, 30]):
        qkv = torch.cat([rows[n] for n in lengths])
        context, _ = packed_auto_attention(qkv, PackedLayout.from_lengths(torch.tensor(lengths)), 4, 0.3, 0.0)
        for sequence, start in zip(lengths, torch.tensor([0, *lengths]).cumsum(0).tolist(), strict=False):
            assert torch.equal(context[start : start + sequence], alone[sequence]), (lengths, sequence)
        if dtype == torch.float32:
            torch.testing.assert_close(context, eager_reference(qkv, torch.tensor(lengths), 4, 0.3))
