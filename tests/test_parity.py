"""Parity with transformers' BertModel on tiny random models; every reference
value is computed by transformers in the same run."""

import pytest
import torch

from tests.helpers import PARITY_CONFIGS as CONFIGS
from tests.helpers import make_hf_model, random_batch, to_bertlite


def make_inputs(config, kind: str) -> dict:
    batch = random_batch(config)
    if kind == "padded":
        return batch
    if kind == "position_ids":
        seq = batch["input_ids"].shape[1]
        batch["position_ids"] = (torch.arange(seq)[None, :] + torch.tensor([[0], [5], [17]])).clamp(
            max=config.max_position_embeddings - 1
        )
        return batch
    if kind == "inputs_embeds":
        ids = batch.pop("input_ids")
        batch["inputs_embeds"] = torch.randn(*ids.shape, config.hidden_size, generator=torch.Generator().manual_seed(3))
        return batch
    if kind == "batch1_no_mask":
        return {"input_ids": batch["input_ids"][:1]}
    if kind == "seq1":
        return {k: v[:, :1] for k, v in batch.items()}
    raise AssertionError(kind)


KINDS = ["padded", "position_ids", "inputs_embeds", "batch1_no_mask", "seq1"]


def run(model, inputs: dict, attentions: bool = True):
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True, output_attentions=attentions)


def assert_outputs_close(ours, theirs, attentions: bool = True, **tol) -> None:
    torch.testing.assert_close(ours.last_hidden_state, theirs.last_hidden_state, **tol)
    torch.testing.assert_close(ours.pooler_output, theirs.pooler_output, **tol)
    assert len(ours.hidden_states) == len(theirs.hidden_states)
    for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        torch.testing.assert_close(a, b, **tol)
    if attentions:
        assert len(ours.attentions) == len(theirs.attentions)
        for a, b in zip(ours.attentions, theirs.attentions, strict=True):
            torch.testing.assert_close(a, b, **tol)


TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kind", KINDS)
def test_eager_matches_transformers_eager(name, kind):
    hf = make_hf_model(attn="eager", **CONFIGS[name])
    ours = to_bertlite(hf, attn="eager")
    inputs = make_inputs(hf.config, kind)
    assert_outputs_close(run(ours, inputs), run(hf, inputs), **TOL)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kind", KINDS)
def test_sdpa_matches_transformers_sdpa(name, kind):
    hf_sdpa = make_hf_model(attn="sdpa", **CONFIGS[name])
    ours = to_bertlite(hf_sdpa, attn="sdpa")
    inputs = make_inputs(hf_sdpa.config, kind)
    assert_outputs_close(run(ours, inputs, attentions=False), run(hf_sdpa, inputs, attentions=False), False, **TOL)
    # transformers' sdpa returns no probabilities; ours does (via eager) and they must be the real ones.
    hf_eager = make_hf_model(attn="eager", **CONFIGS[name])
    for a, b in zip(run(ours, inputs).attentions, run(hf_eager, inputs).attentions, strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("name", ["gelu-4heads", "gelu_new-2heads-3types"])
def test_eager_is_bitwise_equal_in_fp32(name):
    hf = make_hf_model(attn="eager", **CONFIGS[name])
    ours = to_bertlite(hf, attn="eager")
    inputs = make_inputs(hf.config, "padded")
    a, b = run(ours, inputs), run(hf, inputs)
    assert list(a.keys()) == ["last_hidden_state", "pooler_output", "hidden_states", "attentions"]
    for name in a.keys():
        x, y = a[name], b[name]
        if isinstance(x, tuple):
            assert len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y, strict=True)), name
        else:
            assert torch.equal(x, y), name


def test_without_pooler():
    hf = make_hf_model(add_pooling_layer=False)
    ours = to_bertlite(hf)
    inputs = make_inputs(hf.config, "padded")
    with torch.no_grad():
        a, b = ours(**inputs), hf(**inputs)
    assert a.pooler_output is None and b.pooler_output is None
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, **TOL)


def test_tuple_outputs_like_transformers():
    hf = make_hf_model()
    ours = to_bertlite(hf)
    inputs = make_inputs(hf.config, "padded")
    with torch.no_grad():
        a = ours(**inputs, return_dict=False)
        b = hf(**inputs, return_dict=False)
        out = ours(**inputs)
    assert isinstance(a, tuple) and len(a) == len(b) == 2
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, **TOL)
    assert out[0] is out["last_hidden_state"] is out.last_hidden_state
    assert out[1] is out.pooler_output and len(out.to_tuple()) == 2 and "hidden_states" not in out
    with pytest.raises(KeyError):
        out["attentions"]


def test_decoder_config_is_causal_like_transformers():
    hf = make_hf_model(is_decoder=True)
    ours = to_bertlite(hf)
    inputs = make_inputs(hf.config, "padded")
    with torch.no_grad():
        torch.testing.assert_close(ours(**inputs).last_hidden_state, hf(**inputs).last_hidden_state, **TOL)


def test_transformers_v4_keywords_accepted_when_none():
    hf = make_hf_model()
    ours = to_bertlite(hf)
    inputs = make_inputs(hf.config, "padded")
    v4 = dict(head_mask=None, encoder_hidden_states=None, encoder_attention_mask=None, past_key_values=None)
    with torch.no_grad():
        torch.testing.assert_close(ours(**inputs, **v4, use_cache=False)[0], hf(**inputs)[0], **TOL)
    with pytest.raises(NotImplementedError, match="head_mask was removed in transformers v5"):
        ours(**inputs, head_mask=torch.ones(2, 4))


def test_bad_calls_name_the_problem():
    ours = to_bertlite(make_hf_model())
    ids = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(TypeError, match="head_mask_typo"):
        ours(input_ids=ids, head_mask_typo=None)
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        ours(input_ids=ids, inputs_embeds=torch.zeros(2, 5, 32))
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        ours()
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\), expected .* \(2, 5\)"):
        ours(input_ids=ids, attention_mask=torch.ones(2, 4))
