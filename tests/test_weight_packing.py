"""set_weight_packing: float32 Linear weights kept in oneDNN's layout, outside state_dict, same numbers.

That the copies stay out of state_dict and follow load_state_dict: tests/test_packed.py, with the fused copy."""

import copy
import io
import pickle

import pytest
import torch

import bertlite.layers.onednn
from bertlite import Embedder
from bertlite.models.bert import DERIVED_SLOTS
from tests.conftest import make_hf_model, random_batch, to_bertlite
from tests.test_packed import packed_inputs, real_tokens


def packed_forward(model: torch.nn.Module, inputs: dict) -> torch.Tensor:
    """A packed forward after a first one: the weights are packed at the second."""
    model(**inputs)
    return model(**inputs).last_hidden_state


def packing_model(**overrides):
    """A random transformers model, bertlite's copy of it with weight packing on, and a batch."""
    hf = make_hf_model(**overrides)
    ours = to_bertlite(hf, attn="sdpa")
    ours.set_weight_packing(True)
    return hf, ours, random_batch(hf.config, batch=4, seq=13)


def packed_copies(model: torch.nn.Module) -> list[torch.Tensor]:
    """Every weight copy the model's modules keep for packed inference."""
    copies = []
    for module in model.modules():
        if module.__dict__.get("_packed_weight_cache", (None, None))[1] is not None:
            copies.append(module.__dict__["_packed_weight_cache"][1])
        if "_fused_qkv_cache" in module.__dict__:
            copies.extend(t for t in module.__dict__["_fused_qkv_cache"][1] if t is not None)
    return copies


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu"])
def test_packed_weights_match_transformers_and_the_plain_weights(hidden_act):
    hf = make_hf_model(hidden_act=hidden_act)
    ours = to_bertlite(hf, attn="sdpa")
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        plain = ours(**packed_inputs(batch)).last_hidden_state
        ours.set_weight_packing(True)
        first = ours(**packed_inputs(batch)).last_hidden_state
        assert not any(t.is_mkldnn for t in packed_copies(ours))  # a one-off call packs nothing
        packed = ours(**packed_inputs(batch)).last_hidden_state
        reference = real_tokens(hf(**batch).last_hidden_state, batch)
    torch.testing.assert_close(packed, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed, plain, atol=1e-6, rtol=1e-6)
    assert torch.equal(first, plain)
    # 2 dense layers + 1 intermediate + the qkv bias per layer; the qkv weight too where packing works
    copies = packed_copies(ours)
    layers = hf.config.num_hidden_layers
    if bertlite.layers.onednn.pack_weight(torch.ones(4, 3)) is not None:
        assert sum(t.is_mkldnn for t in copies) == 4 * layers
    assert len(copies) >= 4 * layers


def test_a_packed_model_pickles_and_deep_copies_without_its_copies():
    hf, ours, batch = packing_model()
    with torch.no_grad():
        before = packed_forward(ours, packed_inputs(batch))
    assert packed_copies(ours)
    buffer = io.BytesIO()
    torch.save(ours, buffer)
    for clone in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert packed_copies(clone) == []
        with torch.no_grad():
            torch.testing.assert_close(packed_forward(clone, packed_inputs(batch)), before)
        assert packed_copies(clone)  # rebuilt, and the clone still packs


def test_turning_packing_off_frees_the_copies_and_bf16_is_not_packed():
    _, ours, batch = packing_model()
    inputs = packed_inputs(batch)
    with torch.no_grad():
        packed_forward(ours, inputs)
        assert (
            any(t.is_mkldnn for t in packed_copies(ours))
            or bertlite.layers.onednn.pack_weight(torch.ones(4, 3)) is None
        )
        ours.set_weight_packing(False)
        assert not any(slot in m.__dict__ for m in ours.modules() for slot in DERIVED_SLOTS)
        ours(**inputs)
        assert not any(t.is_mkldnn for t in packed_copies(ours))
        ours.set_weight_packing(True)
        packed_forward(ours.to(torch.bfloat16), inputs)
    assert packed_copies(ours) and not any(t.is_mkldnn for t in packed_copies(ours))


def test_without_the_packing_kernel_the_plain_weights_run(monkeypatch):
    monkeypatch.setattr(bertlite.layers.onednn, "_probed", {("packed", torch.float32): False})
    hf, ours, batch = packing_model()
    with torch.no_grad():
        hidden = packed_forward(ours, packed_inputs(batch))
        reference = real_tokens(hf(**batch).last_hidden_state, batch)
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-5)
    assert packed_copies(ours) and not any(t.is_mkldnn for t in packed_copies(ours))


def test_embedder_packs_by_default_and_gives_the_same_vectors(real_model_path, corpus_texts):
    texts = corpus_texts[:64]
    packing = Embedder.from_pretrained(real_model_path, dtype="float32")
    plain = Embedder.from_pretrained(real_model_path, dtype="float32", pack_weights=False)
    first = packing.encode(texts)
    torch.testing.assert_close(packing.encode(texts), plain.encode(texts), atol=1e-6, rtol=0)  # packed now
    torch.testing.assert_close(first, plain.encode(texts), atol=1e-6, rtol=0)
    assert not any(t.is_mkldnn for t in packed_copies(plain.model))
    if bertlite.layers.onednn.pack_weight(torch.ones(4, 3)) is not None:
        assert all(m.__dict__.get("pack_weights") for m in packing.model.encoder.modules() if "dense" in m._modules)
        assert sum(t.is_mkldnn for t in packed_copies(packing.model)) == 4 * packing.model.config.num_hidden_layers
