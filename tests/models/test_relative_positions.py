"""Relative position embeddings (relative_key, relative_key_query) within bertlite.

transformers v5 removed them, so parity with their only reference, transformers
4.x, lives in tests_legacy/ (`make test-legacy`); here: sdpa against eager,
gradients, loading, the fast-path fallback, and what v5 does with such a checkpoint.
"""

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import save_file

import bertlite
from bertlite.jobs.embedder import Embedder
from bertlite.models.bert import supports_packed
from bertlite.tokenization import load_tokenizer
from tests.helpers import TINY, random_batch

TYPES = ["relative_key", "relative_key_query"]
TOL = dict(atol=1e-5, rtol=1e-5)


def make_model(ptype: str, attn: str = "eager", seed: int = 0, **overrides) -> bertlite.BertModel:
    """A random bertlite model with weights far from init (distance embeddings included)."""
    torch.manual_seed(seed)
    config = bertlite.BertConfig(**{**TINY, **overrides}, position_embedding_type=ptype)
    model = bertlite.BertModel(config, attn_implementation=attn)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def copy_with_attn(model: bertlite.BertModel, attn: str) -> bertlite.BertModel:
    other = bertlite.BertModel(model.config, attn_implementation=attn)
    other.load_state_dict(model.state_dict())
    return other.eval()


def save_folder(model: bertlite.BertModel, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.to_dict()))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize("ptype", TYPES)
def test_distance_embedding_per_layer_under_transformers4_names(ptype):
    model = make_model(ptype)
    keys = [k for k in model.state_dict() if "distance_embedding" in k]
    assert keys == [f"encoder.layer.{i}.attention.self.distance_embedding.weight" for i in range(2)]
    assert model.state_dict()[keys[0]].shape == (2 * TINY["max_position_embeddings"] - 1, 32 // 4)


@pytest.mark.parametrize("ptype", TYPES)
@pytest.mark.parametrize("decoder", [False, True])
def test_sdpa_matches_eager(ptype, decoder):
    eager = make_model(ptype, is_decoder=decoder)
    sdpa = copy_with_attn(eager, "sdpa")
    inputs = random_batch(eager.config)
    with torch.no_grad():
        a, b = eager(**inputs, output_hidden_states=True), sdpa(**inputs, output_hidden_states=True)
        probs = sdpa(**inputs, output_attentions=True).attentions  # asking for them selects eager
        reference = eager(**inputs, output_attentions=True).attentions
    torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, **TOL)
    torch.testing.assert_close(b.pooler_output, a.pooler_output, **TOL)
    for x, y in zip(b.hidden_states, a.hidden_states, strict=True):
        torch.testing.assert_close(x, y, **TOL)
    assert all(torch.equal(x, y) for x, y in zip(probs, reference, strict=True))


@pytest.mark.parametrize("ptype", TYPES)
def test_positions_come_only_from_distances(ptype):
    # As in transformers 4.x: the absolute table is not added and position_ids change nothing.
    model = make_model(ptype)
    inputs = random_batch(model.config)
    with torch.no_grad():
        before = model(**inputs).last_hidden_state
        shuffled = model(**inputs, position_ids=torch.arange(11).flip(0)[None].expand(3, -1)).last_hidden_state
        model.embeddings.position_embeddings.weight.zero_()
        zeroed = model(**inputs).last_hidden_state
        model.encoder.layer[0].attention.self.distance_embedding.weight.mul_(2)
        changed = model(**inputs).last_hidden_state
    assert torch.equal(before, shuffled) and torch.equal(before, zeroed)
    assert not torch.allclose(before, changed, atol=1e-3)


@pytest.mark.parametrize("ptype", TYPES)
def test_gradients_flow_and_sdpa_equals_eager(ptype):
    grads = {}
    for attn in ("eager", "sdpa"):
        model = make_model(ptype, attn=attn).train()
        out = model(**random_batch(model.config))
        (out.last_hidden_state.square().sum() + out.pooler_output.sum()).backward()
        grads[attn] = {n: p.grad for n, p in model.named_parameters()}
    for name, grad in grads["eager"].items():
        if name == "embeddings.position_embeddings.weight":
            assert grad is None and grads["sdpa"][name] is None  # unused with relative positions
            continue
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(grads["sdpa"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("ptype", TYPES)
def test_from_pretrained_loads_distance_embeddings(ptype, tmp_path):
    model = make_model(ptype)
    loaded = bertlite.BertModel.from_pretrained(save_folder(model, tmp_path))
    assert loaded.config.position_embedding_type == ptype
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    inputs = random_batch(model.config)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).last_hidden_state, model(**inputs).last_hidden_state, **TOL)


def test_distance_embedding_with_absolute_config_is_refused(tmp_path):
    folder = save_folder(make_model("relative_key"), tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "position_embedding_type": "absolute"}))
    with pytest.raises(bertlite.CheckpointError, match="distance_embedding.weight in model.safetensors"):
        bertlite.BertModel.from_pretrained(folder, strict=False)


def test_transformers5_misruns_a_relative_checkpoint(tmp_path):
    # Why bertlite implements them: v5 loads such a checkpoint with no error (a load report
    # lists the distance embeddings as unexpected), drops them and adds the absolute table.
    model = make_model("relative_key")
    hf = transformers.BertModel.from_pretrained(save_folder(model, tmp_path), attn_implementation="eager").eval()
    inputs = random_batch(model.config)
    with torch.no_grad():
        diff = (hf(**inputs).last_hidden_state - model(**inputs).last_hidden_state).abs().max()
    assert diff > 1e-2


@pytest.mark.parametrize("ptype, decoder", [*((t, False) for t in TYPES), ("absolute", True)])
def test_packed_forward_falls_back_to_the_padded_one(ptype, decoder):
    # A decoder too: the packed layers have no causal mask.
    model = make_model(ptype, attn="sdpa", is_decoder=decoder)
    assert not supports_packed(model.config)
    batch = random_batch(model.config, batch=4, seq=13)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"][mask], token_type_ids=batch["token_type_ids"][mask], lengths=mask.sum(1)
        )
        reference = model(**batch)
    torch.testing.assert_close(packed.last_hidden_state, reference.last_hidden_state[mask], **TOL)
    torch.testing.assert_close(packed.pooler_output, reference.pooler_output, **TOL)


def test_embedder_on_a_relative_checkpoint(real_model_path, corpus_texts):
    tokenizer = load_tokenizer(real_model_path)
    model = make_model("relative_key_query", attn="sdpa", vocab_size=tokenizer.get_vocab_size())
    embedder = Embedder(model, tokenizer, max_length=64)
    texts = corpus_texts[:20]
    vectors = embedder.encode(texts, convert_to="torch")  # packed batches, padded inside BertModel
    padded = Embedder(model, tokenizer, max_length=64, unpad=False).encode(texts, convert_to="torch")
    torch.testing.assert_close(padded, vectors, **TOL)
    for i in (0, 7):  # one text alone: no padding, the plain forward's mean over its tokens
        ids = torch.tensor([embedder.tokenizer.encode(texts[i]).ids])
        with torch.no_grad():
            expected = model(input_ids=ids).last_hidden_state.mean(1)[0]
        torch.testing.assert_close(vectors[i], expected, **TOL)


def test_parity_check_refuses_transformers5_as_the_reference(tmp_path):
    from bertlite.errors import ParityLoadError
    from bertlite.parity import check

    folder = save_folder(make_model("relative_key"), tmp_path)
    with pytest.raises(ParityLoadError, match=r"position_embedding_type='relative_key'.*transformers 4.x"):
        check(folder, texts=["a b c"])
