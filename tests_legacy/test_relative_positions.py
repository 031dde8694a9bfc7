"""Relative position embeddings against transformers 4.x, their only reference
(v5 removed them). Runs in .venv-legacy: `make test-legacy`."""

import pytest
import torch
import transformers

import bertlite
from tests.helpers import make_hf_model, random_batch, to_bertlite

if int(transformers.__version__.split(".")[0]) >= 5:
    pytest.skip("needs transformers 4.x (make test-legacy)", allow_module_level=True)

TYPES = ["relative_key", "relative_key_query"]
CONFIGS = {
    "gelu-4heads": dict(),
    "relu-1head-3types-decoder": dict(
        hidden_act="relu", num_attention_heads=1, type_vocab_size=3, pad_token_id=3, is_decoder=True
    ),
}
TOL = dict(atol=1e-5, rtol=1e-5)


def run(model, inputs: dict, attentions: bool = True):
    # use_cache=False for transformers: with a cache (4.x's default for decoders) it gives every
    # query the last position, even in a plain forward. bertlite has no cache and uses l - r.
    extra = dict(use_cache=False) if isinstance(model, transformers.BertModel) else {}
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True, output_attentions=attentions, **extra)


def assert_outputs_close(ours, theirs, attentions: bool = True, **tol) -> None:
    torch.testing.assert_close(ours.last_hidden_state, theirs.last_hidden_state, **tol)
    torch.testing.assert_close(ours.pooler_output, theirs.pooler_output, **tol)
    for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        torch.testing.assert_close(a, b, **tol)
    if attentions:
        for a, b in zip(ours.attentions, theirs.attentions, strict=True):
            torch.testing.assert_close(a, b, **tol)


def inputs_for(config, kind: str) -> dict:
    batch = random_batch(config)
    if kind == "padded":
        return batch
    if kind == "position_ids":  # 4.x ignores them with relative positions; so must we
        batch["position_ids"] = torch.arange(11).flip(0)[None].expand(3, -1)
        return batch
    if kind == "batch1_no_mask":
        return {"input_ids": batch["input_ids"][:1]}
    raise AssertionError(kind)


@pytest.mark.parametrize("ptype", TYPES)
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kind", ["padded", "position_ids", "batch1_no_mask"])
def test_eager_matches_transformers4(ptype, name, kind):
    hf = make_hf_model(attn="eager", position_embedding_type=ptype, **CONFIGS[name])
    ours = to_bertlite(hf, attn="eager")
    inputs = inputs_for(hf.config, kind)
    assert_outputs_close(run(ours, inputs), run(hf, inputs), **TOL)


@pytest.mark.parametrize("ptype", TYPES)
def test_eager_is_bitwise_equal(ptype):
    hf = make_hf_model(attn="eager", position_embedding_type=ptype)
    ours = to_bertlite(hf, attn="eager")
    inputs = inputs_for(hf.config, "padded")
    a, b = run(ours, inputs), run(hf, inputs)
    assert torch.equal(a.last_hidden_state, b.last_hidden_state)
    assert torch.equal(a.pooler_output, b.pooler_output)
    assert all(torch.equal(x, y) for x, y in zip(a.attentions, b.attentions, strict=True))


@pytest.mark.parametrize("ptype", TYPES)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sdpa_matches_transformers4(ptype, name):
    # transformers 4.x runs relative positions eagerly even when asked for sdpa; ours stays on SDPA.
    hf = make_hf_model(attn="eager", position_embedding_type=ptype, **CONFIGS[name])
    ours = to_bertlite(hf, attn="sdpa")
    inputs = inputs_for(hf.config, "padded")
    assert_outputs_close(run(ours, inputs, attentions=False), run(hf, inputs, attentions=False), False, **TOL)


@pytest.mark.parametrize("ptype", TYPES)
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gradients_match_transformers4(ptype, attn):
    hf = make_hf_model(attn="eager", position_embedding_type=ptype)
    ours = to_bertlite(hf, attn=attn)
    inputs = inputs_for(hf.config, "padded")
    probe = torch.randn(3, 11, hf.config.hidden_size, generator=torch.Generator().manual_seed(7))
    for model in (hf, ours):
        model.train()
        out = model(**inputs)
        ((out.last_hidden_state * probe).sum() + out.pooler_output.square().sum()).backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        if name == "embeddings.position_embeddings.weight":  # unused with relative positions, in both
            assert p.grad is None and theirs[name].grad is None
            continue
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=1e-5, rtol=1e-4, msg=name)
    assert ours.encoder.layer[0].attention.self.distance_embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("ptype", TYPES)
def test_from_pretrained_reads_a_transformers4_folder(ptype, tmp_path):
    hf = make_hf_model(attn="eager", position_embedding_type=ptype)
    hf.save_pretrained(tmp_path)
    ours = bertlite.BertModel.from_pretrained(tmp_path)
    assert ours.config.position_embedding_type == ptype
    inputs = inputs_for(hf.config, "padded")
    a, b = run(ours, inputs, attentions=False), run(hf, inputs, attentions=False)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, **TOL)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, **TOL)


@pytest.mark.parametrize("ptype", TYPES)
def test_transformers4_reads_what_bertlite_saves(ptype, tmp_path):
    ours = to_bertlite(make_hf_model(attn="eager", position_embedding_type=ptype))
    ours.save_pretrained(tmp_path)
    hf = transformers.BertModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert hf.config.position_embedding_type == ptype
    inputs = inputs_for(hf.config, "padded")
    a, b = run(ours, inputs, attentions=False), run(hf, inputs, attentions=False)
    assert torch.equal(a.last_hidden_state, b.last_hidden_state)
    assert torch.equal(a.pooler_output, b.pooler_output)
