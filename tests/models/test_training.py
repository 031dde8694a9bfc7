"""Training: dropout, gradients against transformers, gradient checkpointing, from-scratch init."""

import pytest
import torch
from torch import nn

import bertlite
from tests.helpers import TINY, make_hf_model, random_batch, to_bertlite

GRAD_TOL = dict(atol=1e-5, rtol=1e-4)


def loss_of(model, inputs: dict) -> torch.Tensor:
    """A loss that reaches every parameter, the pooler included, through padded inputs."""
    out = model(**inputs)
    probe = torch.randn(out.last_hidden_state.shape, generator=torch.Generator().manual_seed(7))
    return (out.last_hidden_state * probe).sum() + out.pooler_output.square().sum()


def grads_of(model, inputs: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the dropout masks
    loss_of(model, inputs).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def dropout_names(model: nn.Module) -> list[str]:
    return sorted(name for name, m in model.named_modules() if isinstance(m, nn.Dropout))


def test_dropout_modules_are_transformers_ones():
    hf = make_hf_model()
    names = dropout_names(to_bertlite(hf))
    assert names == dropout_names(hf)
    assert {n.split(".", 3)[-1] for n in names if n.startswith("encoder.layer.")} == {
        "attention.self.dropout",
        "attention.output.dropout",
        "output.dropout",
    }
    assert "embeddings.dropout" in names


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_every_dropout_acts_in_train_mode_only(attn):
    model = to_bertlite(make_hf_model(), attn=attn)
    inputs = random_batch(model.config)
    with torch.no_grad():
        reference = model(**inputs).last_hidden_state
    for name in dropout_names(model):
        module = model.get_submodule(name)
        module.p = 0.5
        with torch.no_grad():
            model.eval()
            assert torch.equal(model(**inputs).last_hidden_state, reference), name
            model.train()
            assert not torch.allclose(model(**inputs).last_hidden_state, reference, atol=1e-3), name
        module.p = 0.0
    model.train()
    with torch.no_grad():  # all off again: train mode is deterministic
        torch.testing.assert_close(model(**inputs).last_hidden_state, reference, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_train_mode_with_dropout_draws_the_masks_transformers_draws(attn):
    # Same seed, same random calls in the same order: the same dropout masks as transformers.
    hf = make_hf_model(attn=attn, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2).train()
    ours = to_bertlite(hf, attn=attn).train()
    inputs = random_batch(hf.config)
    with torch.no_grad():
        torch.manual_seed(5)
        theirs = hf(**inputs).last_hidden_state
        torch.manual_seed(5)
        mine = ours(**inputs).last_hidden_state
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gradients_equal_transformers(attn):
    hf = make_hf_model(attn=attn).train()
    ours = to_bertlite(hf, attn=attn).train()
    inputs = random_batch(hf.config)
    theirs, mine = grads_of(hf, inputs), grads_of(ours, inputs)
    assert mine.keys() == theirs.keys()
    for name, grad in mine.items():
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, theirs[name], **GRAD_TOL, msg=name)


def test_gradients_wrt_inputs_embeds_equal_transformers():
    hf = make_hf_model().train()
    ours = to_bertlite(hf).train()
    batch = random_batch(hf.config)
    embeds = torch.randn(3, 11, 32, generator=torch.Generator().manual_seed(3))
    results = []
    for model in (hf, ours):
        x = embeds.clone().requires_grad_()
        inputs = {"inputs_embeds": x, "attention_mask": batch["attention_mask"]}
        loss_of(model, inputs).backward()
        results.append(x.grad)
    torch.testing.assert_close(results[1], results[0], **GRAD_TOL)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("ptype", ["absolute", "relative_key_query"])
def test_gradient_checkpointing_gives_the_same_gradients(attn, ptype):
    # With dropout on: the recomputation in backward must replay the same masks.
    hf = make_hf_model(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    config = bertlite.BertConfig.from_dict({**hf.config.to_dict(), "position_embedding_type": ptype})
    model = bertlite.BertModel(config, attn_implementation=attn)
    model.load_state_dict(hf.state_dict(), strict=False)
    model.train()
    inputs = random_batch(config)
    plain = grads_of(model, inputs)

    calls = []
    # A pre-hook: the recomputation stops early, once it has what backward needs.
    model.encoder.layer[0].register_forward_pre_hook(lambda *_: calls.append(1))
    assert not model.is_gradient_checkpointing and not model.encoder.gradient_checkpointing
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing and model.encoder.gradient_checkpointing
    checkpointed = grads_of(model, inputs)
    assert len(calls) == 2  # forward, and the recomputation in backward
    for name, grad in plain.items():
        if grad is None:
            assert checkpointed[name] is None, name  # the unused absolute table, with relative positions
            continue
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)

    calls.clear()
    with torch.no_grad():
        model.eval()(**inputs)  # eval mode: nothing to recompute, so no checkpointing
    assert len(calls) == 1
    model.gradient_checkpointing_disable()
    assert not model.is_gradient_checkpointing
    model.train()
    grads_of(model, inputs)
    assert len(calls) == 2  # one more forward, no recomputation


def test_gradient_checkpointing_matches_transformers():
    hf = make_hf_model().train()
    ours = to_bertlite(hf).train()
    ours.gradient_checkpointing_enable()
    inputs = random_batch(hf.config)
    theirs, mine = grads_of(hf, inputs), grads_of(ours, inputs)
    for name, grad in mine.items():
        torch.testing.assert_close(grad, theirs[name], **GRAD_TOL, msg=name)


def test_gradient_checkpointing_kwargs_pass_through():
    model = to_bertlite(make_hf_model()).train()
    model.gradient_checkpointing_enable({"preserve_rng_state": False})
    assert model.encoder.checkpoint_kwargs == {"use_reentrant": False, "preserve_rng_state": False}
    grads = grads_of(model, random_batch(model.config))
    assert all(g is not None for g in grads.values())


def test_transformers5_names_for_checkpointing():
    model = to_bertlite(make_hf_model())
    model.activation_checkpointing_enable({"preserve_rng_state": False})
    assert model.is_activation_checkpointing and model.encoder.checkpoint_kwargs["preserve_rng_state"] is False
    model.activation_checkpointing_disable()
    assert not model.is_activation_checkpointing and not model.encoder.gradient_checkpointing


@pytest.mark.parametrize("initializer_range", [0.02, 0.05])
def test_from_scratch_init_is_transformers_scheme(initializer_range):
    torch.manual_seed(0)
    config = bertlite.BertConfig(
        **{**TINY, "vocab_size": 2000, "hidden_size": 64, "intermediate_size": 256},
        pad_token_id=3,
        position_embedding_type="relative_key",
        initializer_range=initializer_range,
    )
    model = bertlite.BertModel(config)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            weight = module.weight.detach()
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                assert torch.equal(weight[module.padding_idx], torch.zeros(config.hidden_size)), name
                weight = torch.cat([weight[: module.padding_idx], weight[module.padding_idx + 1 :]])
            # Five standard errors: a std estimate's is std / sqrt(2n), a mean's std / sqrt(n).
            n = weight.numel()
            assert abs(weight.std().item() / initializer_range - 1) < 5 / (2 * n) ** 0.5, name
            assert abs(weight.mean().item()) < 5 * initializer_range / n**0.5, name
            if isinstance(module, nn.Linear):
                assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
        elif isinstance(module, nn.LayerNorm):
            assert torch.equal(module.weight, torch.ones_like(module.weight)), name
            assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
    big = model.embeddings.word_embeddings.weight
    assert abs(big.std().item() / initializer_range - 1) < 0.02  # 128,000 draws: within 2%
    assert big.shape == (2000, 64) and big[3].abs().sum() == 0


def test_gradient_checkpointing_every_n_layers_and_offload():
    # transformers v5's Trainer passes both keywords; layer i is recomputed when i % n == 0.
    hf = make_hf_model(num_hidden_layers=3)
    model = to_bertlite(hf).train()
    inputs = random_batch(hf.config)
    plain = grads_of(model, inputs)
    calls = [0, 0, 0]
    for i, layer in enumerate(model.encoder.layer):
        layer.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    model.activation_checkpointing_enable(every_n_layers=2, offload=True)
    checkpointed = grads_of(model, inputs)
    assert calls == [2, 1, 2]
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)
    with pytest.raises(ValueError, match="every_n_layers must be an int >= 1, got 0"):
        model.gradient_checkpointing_enable(every_n_layers=0)
