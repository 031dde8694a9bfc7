"""layers.linear_choice: float32's GEMM per Linear shape, oneDNN's or MKL's, by a timing kept in the cache."""

import json

import pytest
import torch

import bertlite.layers.linear_choice
import bertlite.layers.onednn
from bertlite.cli import main
from bertlite.layers.linear_choice import LinearShape, encoder_shapes, kernel_key, linear_kernel, time_kernels
from bertlite.layers.onednn import (
    FusedQKV,
    OneDNNLinear,
    activation_fusion_works,
    linear_add_works,
    optimize,
    packing_works,
    restore,
)
from bertlite.utils import measured
from tests.helpers import make_hf_model, packed_inputs, random_batch, real_tokens, to_bertlite

PACKING = packing_works(torch.float32)
# Activations as torch's own modules compute them: the reference the fused forms are held to.
REFERENCE_ACTIVATIONS = {"gelu": torch.nn.GELU(), "gelu_pytorch_tanh": torch.nn.GELU("tanh"), "relu": torch.nn.ReLU()}


def mkl_x(x: float) -> measured.Rounds:
    """Rounds in which MKL's GEMM ran x times as fast as oneDNN's."""
    return measured.Rounds({"onednn": [0.01 * x] * measured.ROUNDS, "mkl": [0.01] * measured.ROUNDS})


@pytest.fixture
def kernel_timing(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """kernel_timing(speed_up): the kernel timing says MKL runs each shape speed_up(shape) times as fast as oneDNN,
    with nothing timed or kept yet (a cache folder of the test's own). Returns the list of timed shapes."""
    monkeypatch.setattr(measured, "_decided", {})
    monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "cache"))
    timed: list[tuple] = []

    def use(speed_up) -> list[tuple]:
        def fake(dtype, shape, packed, build):
            timed.append((dtype, shape, packed))
            return mkl_x(speed_up(shape))

        monkeypatch.setattr(bertlite.layers.linear_choice, "time_kernels", fake)
        return timed

    return use


def linear_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every F.linear call from now on, by its weight's shape (torch's GEMM, MKL's for float32 on the CPU)."""
    calls: list[tuple[int, int]] = []
    linear = torch.nn.functional.linear

    def counting(x, weight, bias=None):
        calls.append(tuple(weight.shape))
        return linear(x, weight, bias)

    monkeypatch.setattr(torch.nn.functional, "linear", counting)
    return calls


@pytest.mark.parametrize("kernel", ["onednn", "mkl"])
@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("epilogue", ["none", "add", "gelu", "gelu_pytorch_tanh", "relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_each_form_gives_torchs_numbers(kernel, pack, epilogue, bias):
    if epilogue == "add" and not linear_add_works(torch.float32):
        pytest.skip("oneDNN's linear with the add in its epilogue does not run here")
    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 40, bias=bias)
    x, residual = torch.randn(3, 7, 24), torch.randn(3, 7, 40)
    activation = epilogue if epilogue in REFERENCE_ACTIVATIONS else None
    module = OneDNNLinear(linear, activation, pack, kernel)
    with torch.no_grad():
        expected = linear(x)
        expected = REFERENCE_ACTIVATIONS[activation](expected) if activation else expected
        expected = expected + residual if epilogue == "add" else expected
        out = module(x, residual) if epilogue == "add" else module(x)
    assert module.kernel == kernel and module.pack == (pack and kernel == "onednn")
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["onednn", "mkl"])
def test_fused_qkv_gives_the_three_linears_numbers_on_either_kernel(kernel):
    torch.manual_seed(0)
    query, key, value = (torch.nn.Linear(16, 16) for _ in range(3))
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        out = FusedQKV(query, key, value, pack=True, kernel=kernel)(x)
        expected = torch.cat([query(x), key(x), value(x)], dim=-1)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="kernel must be one of"):
        OneDNNLinear(torch.nn.Linear(2, 2), kernel="blas")


def tiny_shapes(config, activation: str | None) -> dict[str, LinearShape]:
    return encoder_shapes(config.hidden_size, config.intermediate_size, activation)


def write_verdicts(verdict: str, shapes, packed: bool) -> None:
    """Keep a decided verdict for each shape in the cache file, as an earlier process would have."""
    x = 1.5 if verdict == "mkl" else 0.7
    entries = {kernel_key(torch.float32, s, packed): {"rounds": mkl_x(x).seconds, "busy": 0} for s in shapes}
    measured.cache_path().parent.mkdir(parents=True, exist_ok=True)
    measured.cache_path().write_text(json.dumps(entries))


@pytest.mark.parametrize("verdict", ["mkl", "onednn"])
def test_the_verdict_is_read_from_the_cache_and_the_model_runs_that_kernel(kernel_timing, verdict, monkeypatch):
    timed = kernel_timing(lambda shape: pytest.fail(f"timed {shape}: the cache holds its verdict"))
    hf = make_hf_model(hidden_act="relu")
    write_verdicts(verdict, tiny_shapes(hf.config, None).values(), PACKING)
    ours = optimize(to_bertlite(hf, attn="sdpa"), fuse_activation=False)
    layer = ours.encoder.layer[0]
    modules = [layer.attention.self.qkv, layer.attention.output.dense, layer.intermediate.dense, layer.output.dense]
    assert timed == [] and [m.kernel for m in modules] == [verdict] * 4
    batch = random_batch(hf.config, batch=4, seq=13)
    calls = linear_calls(monkeypatch)
    with torch.no_grad():
        ours(**packed_inputs(batch))
    per_layer = [(96, 32), (32, 32), (37, 32), (32, 37)]
    pooler = [(32, 32)]  # a plain Linear, never swapped
    assert calls == (per_layer * 2 + pooler if verdict == "mkl" else pooler)
    assert all(m.pack == (verdict == "onednn" and PACKING) for m in modules)


@pytest.mark.parametrize("verdict", ["mkl", "onednn"])
@pytest.mark.parametrize(("hidden_act", "fuse"), [("gelu", True), ("gelu", False), ("relu", True), ("gelu_new", None)])
def test_a_model_optimized_under_either_verdict_gives_the_eager_models_numbers(
    kernel_timing, verdict, hidden_act, fuse
):
    kernel_timing(lambda shape: 1.5 if verdict == "mkl" else 0.7)
    hf = make_hf_model(hidden_act=hidden_act)
    eager = to_bertlite(hf, attn="eager")
    ours = optimize(to_bertlite(hf, attn="sdpa"), fuse_activation=fuse)
    assert {m.kernel for m in ours.modules() if isinstance(m, (OneDNNLinear, FusedQKV))} == {verdict}
    batch = random_batch(hf.config, batch=4, seq=13)
    with torch.no_grad():
        reference = eager(**batch).last_hidden_state
        packed = ours(**packed_inputs(batch)).last_hidden_state
        padded = ours(**batch).last_hidden_state
    torch.testing.assert_close(packed, real_tokens(reference, batch), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(real_tokens(padded, batch), real_tokens(reference, batch), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("speed_up", "picked"), [(1.3, "mkl"), (1.05, "onednn"), (0.8, "onednn")])
def test_mkl_runs_a_shape_only_where_timed_faster_by_the_rule_and_each_shape_is_timed_once(
    kernel_timing, speed_up, picked
):
    timed = kernel_timing(lambda shape: speed_up)
    hf = make_hf_model(hidden_act="gelu")
    ours = optimize(to_bertlite(hf, attn="sdpa"), fuse_activation=True)
    config = hf.config
    shapes = [shape for _, shape, _ in timed]
    assert len(shapes) == 4 and set(shapes) == set(tiny_shapes(config, "gelu").values())  # per shape, not per layer
    assert all(dtype == torch.float32 and packed == PACKING for dtype, _, packed in timed)
    assert all(layer.intermediate.dense.kernel == picked for layer in ours.encoder.layer)


def test_a_shape_whose_intermediate_activation_runs_apart_is_timed_without_it(kernel_timing):
    timed = kernel_timing(lambda shape: 1.3)
    optimize(to_bertlite(make_hf_model(hidden_act="gelu"), attn="sdpa"), fuse_activation=False)
    assert sorted(shape.epilogue for _, shape, _ in timed) == ["add", "add", "none", "none"]


def test_other_dtypes_run_onednn_untimed(kernel_timing):
    timed = kernel_timing(lambda shape: 2.0)
    assert linear_kernel(torch.bfloat16, LinearShape(32, 32), False, OneDNNLinear) == "onednn" and timed == []


def test_restore_gives_back_plain_linears_with_the_same_parameters(kernel_timing):
    kernel_timing(lambda shape: 1.5)  # MKL everywhere
    ours = to_bertlite(make_hf_model(), attn="sdpa")
    parameters = dict(ours.named_parameters())
    optimize(ours, fuse_activation=False)
    assert all(m.kernel == "mkl" for m in ours.modules() if isinstance(m, (OneDNNLinear, FusedQKV)))
    restore(ours)
    assert all(type(m) is torch.nn.Linear for m in ours.modules() if isinstance(m, torch.nn.Linear))
    assert all(p is parameters[name] for name, p in ours.named_parameters())
    assert ours.encoder.layer[0].attention.self.qkv is None


@pytest.mark.parametrize("epilogue", ["none", "add", "gelu"])
def test_the_kernel_timing_runs_both_forms(monkeypatch, epilogue):
    monkeypatch.setattr(measured, "MIN_SHARE", 0.0)  # every round counts, however busy the machine ...
    monkeypatch.setattr(measured, "BUDGET_SECONDS", float("inf"))  # ... and slow
    monkeypatch.setattr(bertlite.layers.linear_choice, "KERNEL_TOKENS", 64)
    rounds = time_kernels(torch.float32, LinearShape(16, 24, epilogue), PACKING, OneDNNLinear)
    assert set(rounds.seconds) == {"onednn", "mkl"} and rounds.busy == 0
    assert all(len(s) == measured.ROUNDS and all(0 < x < float("inf") for x in s) for s in rounds.seconds.values())


def test_the_verdict_is_kept_for_later_processes(kernel_timing):
    timed = kernel_timing(lambda shape: 1.3 if shape.epilogue == "add" else 1.0)
    shape = LinearShape(32, 32, "add")
    assert linear_kernel(torch.float32, shape, True, OneDNNLinear) == "mkl"
    measured._decided.clear()  # a new process: the file answers
    assert linear_kernel(torch.float32, shape, True, OneDNNLinear) == "mkl" and len(timed) == 1
    entry = json.loads(measured.cache_path().read_text())[kernel_key(torch.float32, shape, True)]
    assert entry == {"rounds": mkl_x(1.3).seconds, "busy": 0}
    assert "linear kernel: torch.float32 32 -> 32, add epilogue, oneDNN weight packed" in kernel_key(
        torch.float32, shape, True
    )


def test_env_lists_the_kernel_verdict_of_each_of_bert_bases_shapes(kernel_timing, monkeypatch, capsys):
    timed = kernel_timing(lambda shape: 1.3 if shape.out_features == 3072 else 0.9)
    fusion = measured.Rounds({"fused": [0.01] * measured.ROUNDS, "separate": [0.02] * measured.ROUNDS})
    monkeypatch.setattr(bertlite.layers.onednn, "time_fusion", lambda *args: fusion)  # GELU stays fused
    monkeypatch.setattr(measured, "_decided", {})
    activation = "gelu" if activation_fusion_works("gelu", torch.float32) else "none"
    assert main(["env", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["float32_linear_kernels"]
    shapes = [(r["role"], r["in_features"], r["out_features"], r["epilogue"], r["kernel"]) for r in rows]
    residual = linear_add_works(torch.float32)
    expected = [
        ("qkv", 768, 2304, "none", "onednn"),
        *([("attention_output", 768, 768, "add", "onednn")] if residual else []),
        ("intermediate", 768, 3072, activation, "mkl"),
        *([("output", 3072, 768, "add", "onednn")] if residual else []),
    ]
    assert shapes == expected and len(timed) == len(expected)
    assert rows[0]["kept"] and rows[0]["seconds"] == pytest.approx({"onednn": 0.009, "mkl": 0.01})
    assert rows[0]["spread"] == pytest.approx({"rounds": 5, "busy": 0, "min": 0.9, "median": 0.9, "max": 0.9})
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    assert "float32 Linear kernels (BERT-base's shapes" in text
    assert (
        f"  intermediate 768 -> 3072, {activation} epilogue: mkl ran 1.30x onednn (1.30-1.30x over 5 rounds): mkl"
        in text
    )
    assert "  qkv 768 -> 2304, none epilogue: mkl ran 0.90x onednn (0.90-0.90x over 5 rounds): onednn" in text


def test_the_kernel_timing_leaves_torchs_random_state_be(monkeypatch):
    monkeypatch.setattr(measured, "BUDGET_SECONDS", 0.0)  # one round at most: only the random state matters here
    state = torch.random.get_rng_state()
    time_kernels(torch.float32, LinearShape(16, 24, "add"), PACKING, OneDNNLinear)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_a_module_pickled_without_a_kernel_runs_onednns() -> None:
    import pickle

    from bertlite.layers.onednn import FusedQKV, OneDNNLinear

    linears = [torch.nn.Linear(8, 8) for _ in range(3)]
    x = torch.randn(5, 8)
    for module in (OneDNNLinear(linears[0]), FusedQKV(*linears)):
        del module.__dict__["kernel"]  # as an earlier bertlite pickled it
        loaded = pickle.loads(pickle.dumps(module))
        assert loaded.kernel == "onednn"
        with torch.no_grad():
            expected = torch.cat([m(x) for m in linears], dim=-1) if isinstance(module, FusedQKV) else linears[0](x)
            torch.testing.assert_close(loaded(x), expected, rtol=1e-5, atol=1e-5)
