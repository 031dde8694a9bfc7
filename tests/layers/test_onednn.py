"""layers.onednn.optimize: the fast inference modules, swapped in at construction, with transformers' numbers."""

import copy
import io
import json
import pickle

import pytest
import torch

import bertlite.layers.linear_choice
import bertlite.layers.onednn
from bertlite import Embedder
from bertlite.cli import main
from bertlite.layers.onednn import FusedQKV, OneDNNLinear, is_optimized, optimize, restore
from bertlite.utils import measured
from tests.helpers import make_hf_model, packed_inputs, random_batch, real_tokens, to_bertlite

PACKING = bertlite.layers.onednn.packing_works(torch.float32)


@pytest.fixture(autouse=True)
def onednn_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Linear's GEMM is oneDNN's, untimed and not cached: these tests are of the oneDNN forms (the choice
    of MKL's is tested in test_linear_choice)."""
    rounds = measured.Rounds({"onednn": [0.01] * measured.ROUNDS, "mkl": [0.02] * measured.ROUNDS})
    verdict = measured.judge(rounds, "onednn", "mkl")
    monkeypatch.setattr(bertlite.layers.linear_choice, "kernel_choice", lambda dtype, shape, packed, build: verdict)


def packed_copies(model: torch.nn.Module) -> list[torch.Tensor]:
    """Every oneDNN-layout weight copy the model's modules keep."""
    copies = []
    for module in model.modules():
        for slot in ("_derived_packed", "_derived_fused"):
            if slot in module.__dict__:
                value = module.__dict__[slot][1]
                copies.extend(t for t in (value if isinstance(value, tuple) else (value,)) if t.is_mkldnn)
    return copies


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu"])
@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("fuse", [False, True])
def test_optimized_model_matches_transformers_padded_and_packed(hidden_act, pack, fuse):
    hf = make_hf_model(hidden_act=hidden_act)
    ours = optimize(to_bertlite(hf, attn="sdpa"), pack_weights=pack, fuse_activation=fuse)
    layer = ours.encoder.layer[0]
    assert isinstance(layer.attention.self.qkv, FusedQKV) and isinstance(layer.output.dense, OneDNNLinear)
    assert layer.attention.self.attn_implementation == "auto" and layer.output.fuses_residual
    assert layer.intermediate.dense.activation == (hidden_act if fuse and hidden_act != "gelu_new" else None)
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        reference = hf(**batch).last_hidden_state
        packed = ours(**packed_inputs(batch)).last_hidden_state
        padded = ours(**batch).last_hidden_state
    torch.testing.assert_close(packed, real_tokens(reference, batch), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(real_tokens(padded, batch), real_tokens(reference, batch), atol=1e-5, rtol=1e-5)
    assert len(packed_copies(ours)) == (4 * hf.config.num_hidden_layers if pack and PACKING else 0)


@pytest.fixture
def fusion_timing(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """fusion_timing(fused_x): the timing of activation fusion says the fused GEMM runs fused_x times as long
    as GEMM-then-activation, with nothing timed or kept yet. Returns the list of timed (activation, sizes)."""
    monkeypatch.setattr(measured, "_decided", {})
    monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "cache"))
    timed: list[tuple] = []

    def use(fused_x: float) -> list[tuple]:
        def time_fusion(activation, dtype, in_features, out_features):
            timed.append((activation, dtype, in_features, out_features))
            return measured.Rounds({"fused": [0.01 * fused_x] * measured.ROUNDS, "separate": [0.01] * measured.ROUNDS})

        monkeypatch.setattr(bertlite.layers.onednn, "time_fusion", time_fusion)
        return timed

    return use


@pytest.mark.parametrize(("fused_x", "fused"), [(1.3, False), (1.05, True), (0.8, True)])
def test_the_activation_is_fused_only_where_that_is_not_measured_slower(fusion_timing, fused_x, fused):
    timed = fusion_timing(fused_x)
    hf = make_hf_model(hidden_act="gelu")
    ours = optimize(to_bertlite(hf, attn="sdpa"))
    config = hf.config
    assert timed == [("gelu", torch.float32, config.hidden_size, config.intermediate_size)]  # once, not per layer
    for layer in ours.encoder.layer:
        assert layer.intermediate.dense.activation == ("gelu" if fused else None)
    batch = random_batch(config, batch=4, seq=13)
    with torch.no_grad():
        hidden = ours(**packed_inputs(batch)).last_hidden_state
        reference = real_tokens(hf(**batch).last_hidden_state, batch)
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-5)


def test_the_fusion_timing_is_kept_for_later_processes(fusion_timing):
    timed = fusion_timing(1.3)
    hf = make_hf_model(hidden_act="gelu")
    optimize(to_bertlite(hf, attn="sdpa"))
    measured._decided.clear()  # a new process: the file answers
    again = optimize(to_bertlite(hf, attn="sdpa"))
    assert len(timed) == 1 and again.encoder.layer[0].intermediate.dense.activation is None
    (entry,) = json.loads(measured.cache_path().read_text()).items()
    assert "gelu epilogue" in entry[0]
    assert entry[1] == {"rounds": {"fused": [0.01 * 1.3] * 5, "separate": [0.01] * 5}, "busy": 0}


def test_the_fusion_timing_runs_both_forms(monkeypatch):
    monkeypatch.setattr(measured, "MIN_SHARE", 0.0)  # every round counts, however busy the machine ...
    monkeypatch.setattr(measured, "BUDGET_SECONDS", float("inf"))  # ... and slow
    rounds = bertlite.layers.onednn.time_fusion("gelu", torch.float32, 16, 24)
    assert set(rounds.seconds) == {"fused", "separate"} and rounds.busy == 0
    assert all(len(s) == measured.ROUNDS and all(0 < x < float("inf") for x in s) for s in rounds.seconds.values())


def test_packed_and_plain_weights_give_the_same_numbers():
    hf = make_hf_model()
    batch = packed_inputs(random_batch(hf.config, batch=4, seq=13))
    with torch.no_grad():
        plain = optimize(to_bertlite(hf, attn="sdpa"), pack_weights=False)(**batch).last_hidden_state
        packed = optimize(to_bertlite(hf, attn="sdpa"), pack_weights=True)(**batch).last_hidden_state
    torch.testing.assert_close(packed, plain, atol=1e-6, rtol=1e-6)


def test_state_dict_keeps_transformers_keys_and_the_copies_follow_weight_changes():
    hf, other = make_hf_model(seed=0), make_hf_model(seed=1)
    ours = to_bertlite(hf, attn="sdpa")
    keys = list(ours.state_dict())
    optimize(ours)
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        ours(**packed_inputs(batch))  # builds the fused and packed copies
    state = ours.state_dict()
    assert list(state) == keys
    pointers = [t.untyped_storage().data_ptr() for t in state.values()]
    assert len(set(pointers)) == len(pointers)  # no fused buffer under the parameters
    ours.load_state_dict(other.state_dict())  # copies in place: every derived copy must notice
    with torch.no_grad():
        packed = ours(**packed_inputs(batch)).last_hidden_state
        reference = real_tokens(other(**batch).last_hidden_state, batch)
    torch.testing.assert_close(packed, reference, atol=1e-5, rtol=1e-5)


def test_an_optimized_model_pickles_and_deep_copies_without_its_copies():
    hf = make_hf_model()
    ours = optimize(to_bertlite(hf, attn="sdpa"))
    inputs = packed_inputs(random_batch(hf.config, batch=4, seq=13))
    with torch.no_grad():
        before = ours(**inputs).last_hidden_state
    buffer = io.BytesIO()
    torch.save(ours, buffer)
    for clone in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert not any(k.startswith("_derived_") for m in clone.modules() for k in m.__dict__)
        qkv = clone.encoder.layer[0].attention.self
        assert qkv.qkv.projections[0] is qkv.query  # the copy reads its own projections, not the original's
        with torch.no_grad():
            torch.testing.assert_close(clone(**inputs).last_hidden_state, before)


def test_training_through_an_optimized_model_matches_the_plain_one():
    hf = make_hf_model()
    batch = random_batch(hf.config, batch=4, seq=13)
    grads = []
    for optimized in (True, False):
        ours = to_bertlite(hf, attn="sdpa")
        if optimized:
            optimize(ours)
        ours.train()
        out = ours(**packed_inputs(batch))
        (out.last_hidden_state.square().mean() + out.pooler_output.sum()).backward()
        grads.append({n: p.grad for n, p in ours.named_parameters()})
    assert grads[0]["encoder.layer.0.attention.self.query.weight"].abs().sum() > 0
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_restore_and_eager_give_back_plain_modules_and_transformers_bits():
    hf = make_hf_model()
    ours = optimize(to_bertlite(hf, attn="sdpa"))
    ours.set_attn_implementation("eager")
    assert not is_optimized(ours)
    assert all(type(m) is torch.nn.Linear for m in ours.modules() if isinstance(m, torch.nn.Linear))
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        assert torch.equal(ours(**batch).last_hidden_state, hf(**batch).last_hidden_state)
    assert restore(ours) is ours  # restoring a plain model changes nothing


def test_bf16_is_optimized_without_packing_and_close_to_fp32():
    hf = make_hf_model()
    inputs = packed_inputs(random_batch(hf.config, batch=4, seq=13))
    with torch.no_grad():
        fp32 = to_bertlite(hf, attn="sdpa")(**inputs).last_hidden_state
        low = optimize(to_bertlite(hf, attn="sdpa").to(torch.bfloat16))
        hidden = low(**inputs).last_hidden_state
    assert packed_copies(low) == []
    cosine = torch.nn.functional.cosine_similarity(hidden.float(), fp32, dim=-1)
    assert hidden.dtype == torch.bfloat16 and cosine.min() > 0.99


def test_bf16_compute_keeps_the_residual_stream_in_float32_and_the_parameters_exact():
    # Weights at init scale (0.02), as a trained checkpoint's are: bf16's error then compounds as it does there.
    torch.manual_seed(0)
    hf = make_hf_model(hidden_size=128, num_attention_heads=4, intermediate_size=512, num_hidden_layers=4)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "LayerNorm" not in name:
                p.normal_(0.0, 0.05)
    inputs = packed_inputs(random_batch(hf.config, batch=4, seq=30))
    reference = to_bertlite(hf, attn="sdpa")
    kept = {name: t.clone() for name, t in reference.state_dict().items()}
    with torch.no_grad():
        fp32 = reference(**inputs).last_hidden_state
        mixed_model = optimize(to_bertlite(hf, attn="sdpa"), compute=torch.bfloat16)
        mixed = mixed_model(**inputs).last_hidden_state
        pure = optimize(to_bertlite(hf, attn="sdpa").to(torch.bfloat16))(**inputs).last_hidden_state.float()
    assert mixed.dtype == torch.float32 and packed_copies(mixed_model) == []
    modules = [m for m in mixed_model.modules() if isinstance(m, (OneDNNLinear, FusedQKV))]
    assert modules and all(m.compute == torch.bfloat16 for m in modules)
    mixed_error, pure_error = (mixed - fp32).abs().max(), (pure - fp32).abs().max()
    assert 0 < mixed_error < pure_error / 2, (mixed_error, pure_error)  # bf16 ran, and compounded less
    assert all(torch.equal(t, kept[name]) for name, t in mixed_model.state_dict().items())
    with torch.no_grad():  # back to float32: the Parameters never changed, so float32's bits
        assert torch.equal(
            optimize(restore(mixed_model))(**inputs).last_hidden_state, optimize(reference)(**inputs).last_hidden_state
        )


@pytest.mark.parametrize("form", ["plain", "residual", "gelu", "qkv"])
def test_bf16_compute_rounds_each_gemm_output_to_bf16_once_at_most(form):
    # Against float64 on the inputs the GEMM takes (x and W rounded to bf16): float32 accumulation, float32
    # biases (large here, so rounding one to bf16 shows) and at most one rounding of the output to bf16.
    if form == "gelu" and not bertlite.layers.onednn.mixed_bias_works(torch.bfloat16):
        pytest.skip("oneDNN here takes no float32 bias beside bf16 inputs (optimize runs GELU after the GEMM)")
    torch.manual_seed(0)
    linears = [torch.nn.Linear(256, 96) for _ in range(3 if form == "qkv" else 1)]
    with torch.no_grad():
        for linear in linears:
            linear.bias.uniform_(4.0, 8.0)
    x, residual = torch.randn(64, 256), torch.randn(64, 96)
    if form == "qkv":
        module = FusedQKV(*linears, compute=torch.bfloat16)
    else:
        module = OneDNNLinear(linears[0], activation="gelu" if form == "gelu" else None, compute=torch.bfloat16)
    weight = torch.cat([linear.weight for linear in linears]).detach()
    bias = torch.cat([linear.bias for linear in linears]).detach().double()
    gemm = x.bfloat16().double() @ weight.bfloat16().double().T  # exact: bf16 products, float64 sums
    with torch.no_grad():
        out = module(x, residual) if form == "residual" else module(x)
    if form == "gelu":  # GELU's output is the next GEMM's bf16 input: rounded once, after the float32 bias
        reference = torch.nn.functional.gelu(gemm + bias)
        rounded = reference.abs()
    else:  # float32 out: the GEMM's own output rounded once, then the float32 bias and residual added
        reference = gemm + bias + (residual.double() if form == "residual" else 0)
        rounded = gemm.abs()
    bound = 2.0**-8 * rounded + 1e-5 * (1 + reference.abs())  # bf16's unit roundoff; float32 sums and GELU
    assert out.dtype == (torch.bfloat16 if form == "gelu" else torch.float32)
    assert ((out.double() - reference).abs() <= bound).all(), ((out.double() - reference).abs() / bound).max()


def test_bf16_compute_runs_the_activation_after_the_gemm_where_onednn_takes_no_float32_bias(monkeypatch):
    monkeypatch.setitem(bertlite.layers.onednn._probed, ("mixed_bias", torch.bfloat16), False)
    hf = make_hf_model(hidden_act="gelu")
    ours = optimize(to_bertlite(hf, attn="sdpa"), compute=torch.bfloat16)
    assert all(layer.intermediate.dense.activation is None for layer in ours.encoder.layer)
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        hidden = ours(**packed_inputs(batch)).last_hidden_state
        reference = real_tokens(hf(**batch).last_hidden_state, batch)
    cosine = torch.nn.functional.cosine_similarity(hidden, reference, dim=-1)
    assert hidden.dtype == torch.float32 and cosine.min() > 0.999


@pytest.mark.parametrize("works", [True, False])
def test_only_forms_onednn_runs_here_are_installed(works, monkeypatch):
    probed = {(form, dtype): works for form in ("linear", "linear_add", "packed") for dtype in (torch.float32,)}
    monkeypatch.setattr(bertlite.layers.onednn, "_probed", probed)
    hf = make_hf_model(hidden_act="gelu")
    ours = optimize(to_bertlite(hf, attn="sdpa"))
    assert is_optimized(ours) == works
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        hidden = ours(**packed_inputs(batch)).last_hidden_state
        reference = real_tokens(hf(**batch).last_hidden_state, batch)
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fuse", [None, True])
def test_an_activation_onednn_cannot_fuse_here_runs_after_the_gemm_untimed(fuse, fusion_timing, monkeypatch):
    timed = fusion_timing(0.8)  # the timing would say fuse
    monkeypatch.setitem(bertlite.layers.onednn._probed, ("linear_gelu", torch.float32), False)
    hf = make_hf_model(hidden_act="gelu")
    ours = optimize(to_bertlite(hf, attn="sdpa"), fuse_activation=fuse)
    assert timed == [] and is_optimized(ours)
    assert all(layer.intermediate.dense.activation is None for layer in ours.encoder.layer)
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        hidden = ours(**packed_inputs(batch)).last_hidden_state
        reference = real_tokens(hf(**batch).last_hidden_state, batch)
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-5)


def test_the_fused_activation_probe_compares_with_torchs_activation(monkeypatch):
    monkeypatch.setattr(bertlite.layers.onednn, "_probed", {})
    assert bertlite.layers.onednn.activation_fusion_works("gelu", torch.float32) == bertlite.layers.onednn.linear_works(
        torch.float32
    )
    wrong = {"gelu": ("relu", "")}  # a fused form that gives other numbers than GELU's
    monkeypatch.setattr(bertlite.layers.onednn, "FUSED_ACTIVATIONS", wrong)
    monkeypatch.setattr(bertlite.layers.onednn, "_probed", {})
    assert not bertlite.layers.onednn.activation_fusion_works("gelu", torch.float32)


def test_adapters_and_int8_modules_are_left_alone():
    hf = make_hf_model()
    ours = to_bertlite(hf, attn="sdpa")

    class Shifted(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base

        def forward(self, x):
            return self.base(x) + 0.5

    attention = ours.encoder.layer[1].attention.self
    attention.value = Shifted(attention.value)
    optimize(ours)
    assert attention.qkv is None and isinstance(ours.encoder.layer[0].attention.self.qkv, FusedQKV)
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        packed = ours(**packed_inputs(batch)).last_hidden_state
        padded = real_tokens(ours(**batch).last_hidden_state, batch)
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)


def test_optimize_refuses_what_is_not_a_bert_model():
    with pytest.raises(TypeError, match="optimize takes a bertlite BERT model, got Linear"):
        optimize(torch.nn.Linear(2, 2))


@pytest.mark.slow
def test_embedder_optimizes_and_packs_by_default(real_model_path, corpus_texts):
    texts = corpus_texts[:64]
    packing = Embedder.from_pretrained(real_model_path, dtype="float32")
    plain = Embedder.from_pretrained(real_model_path, dtype="float32", pack_weights=False)
    torch.testing.assert_close(packing.encode(texts), plain.encode(texts), atol=1e-6, rtol=0)
    assert is_optimized(packing.model) and is_optimized(plain.model)
    assert packed_copies(plain.model) == []
    if PACKING:
        assert len(packed_copies(packing.model)) == 4 * packing.model.config.num_hidden_layers


@pytest.mark.parametrize("fused_x", [1.3, 0.9])
def test_env_shows_where_gelu_runs_and_its_timing(fusion_timing, fused_x, capsys):
    timed = fusion_timing(fused_x)
    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["gelu_fused_in_gemm"]
    assert report == {"fused": fused_x < 1.1, "seconds": {"fused": 0.01 * fused_x, "separate": 0.01}}
    assert timed == [("gelu", torch.float32, 768, 3072)]
    assert main(["env"]) == 0
    where = "inside oneDNN's GEMM" if fused_x < 1.1 else "after the GEMM"
    assert f"float32 GELU runs {where} (fused ran {fused_x:.2f}x as long as GEMM then GELU" in capsys.readouterr().out


def test_env_says_nothing_of_gelu_where_onednn_cannot_fuse_it(fusion_timing, monkeypatch, capsys):
    timed = fusion_timing(0.8)
    monkeypatch.setitem(bertlite.layers.onednn._probed, ("linear_gelu", torch.float32), False)
    assert main(["env", "--json"]) == 0
    assert "gelu_fused_in_gemm" not in json.loads(capsys.readouterr().out) and timed == []
    assert main(["env"]) == 0
    assert "GELU" not in capsys.readouterr().out
