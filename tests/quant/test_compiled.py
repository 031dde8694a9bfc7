"""Int8Linear's input quantization compiled by torch.compile (bertlite.quant.compiled): the eager ops'
integers bit for bit, the same vectors, and the eager ops wherever it cannot run."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from bertlite.jobs.embedder import Embedder
from bertlite.quant import compiled as compiled_quant
from bertlite.quant import int8 as quantization
from bertlite.quant import ops
from bertlite.quant.int8 import Int8Linear, quantize_int8, quantize_rows
from tests.helpers import make_hf_model, random_batch, to_bertlite


@pytest.fixture(scope="module")
def built() -> bool:
    assert compiled_quant.build(), compiled_quant.reason()
    return True


def rows_with_ties(rows: int, depth: int, asymmetric: bool, activation_max: int, zero_point: int) -> torch.Tensor:
    """Random rows, plus rows whose scale is exactly 1 holding values a hair below k + 1/2: adding the
    zero point in float32 rounds them onto the tie (round(y + zp) != round(y) + zp), where an
    implementation that rounds first would give other integers."""
    generator = torch.Generator().manual_seed(rows * depth)
    x = torch.randn(rows, depth, generator=generator) * 3
    x[:, depth // 3] *= 30  # an outlier channel
    if rows >= 4:
        top = float(activation_max if asymmetric else zero_point - 1)
        x[-2:] = torch.linspace(0.0 if asymmetric else -top, top, depth).round()
        # ties after + zero point, below the row's max and min (its ends): scale 1
        x[-2:, 1:-1] = x[-2:, 1:-1].clamp(-top + 1, top - 1) + (0.5 - 2.0**-20)
    return x


def every_quantization_form(test):
    """Parametrize `test` over the inputs and forms a row quantization must give the eager integers for: rows,
    depth (384, and 401 for a scalar tail), smoothed, asymmetric, and the full and a 7-bit grid."""
    for mark in reversed(
        [
            pytest.mark.parametrize("rows", [1, 4, 257]),
            pytest.mark.parametrize("depth", [384, 401]),
            pytest.mark.parametrize("smoothed", [False, True]),
            pytest.mark.parametrize("asymmetric", [False, True]),
            pytest.mark.parametrize(
                "grid", [quantization.FULL_GRID, quantization.Int8Grid(127, 127)], ids=["8-bit", "7-bit"]
            ),
        ]
    ):
        test = mark(test)
    return test


@every_quantization_form
@pytest.mark.slow
def test_compiled_kernel_gives_the_eager_integers_bit_for_bit(built, rows, depth, smoothed, asymmetric, grid):
    zero_point = 0 if asymmetric else grid.zero_point
    x = rows_with_ties(rows, depth, asymmetric, grid.activation_max, zero_point)
    input_scale = torch.rand(depth, generator=torch.Generator().manual_seed(7)) + 0.5 if smoothed else None
    with torch.inference_mode():
        x = x.clone()
        compiled = compiled_quant.quantize(x, input_scale, asymmetric, grid.activation_max, zero_point)
        eager = quantize_rows(x, input_scale, asymmetric, grid.activation_max, zero_point)
    assert compiled is not None
    for got, expected in zip(compiled, eager, strict=True):
        assert torch.equal(got, expected)
    if rows >= 4 and not smoothed and not asymmetric:  # the tie rows round otherwise with round-then-add
        q = compiled[0][-1].to(torch.int16)
        y = x[-1] / compiled[1][-1]
        assert not torch.equal(q, (y.round() + zero_point).to(torch.int16))


@pytest.mark.slow
def test_int8_vectors_are_the_same_with_and_without_the_compiled_kernel(
    built, monkeypatch, real_model_path: Path, corpus_texts: list[str]
) -> None:
    monkeypatch.setattr(ops.OP, "state", {})  # this kernel, not the C++ ops a test before may have built
    monkeypatch.setenv("BERTLITE_INT8_OPS", "0")  # nor the ones quantize_int8 builds by default
    compiled = Embedder.from_pretrained(real_model_path, dtype="int8")
    eager = Embedder.from_pretrained(real_model_path, dtype="int8")  # the same model and kernels, ...
    for layer in eager.model.modules():
        if isinstance(layer, Int8Linear):
            layer.compiled = False  # ... but the eager quantization
    flags = {
        name: {m.compiled for m in e.model.modules() if isinstance(m, Int8Linear)}
        for name, e in (("compiled", compiled), ("eager", eager))
    }
    assert flags == {"compiled": {True}, "eager": {False}}
    calls = []
    kernel = compiled_quant.OP.state["ops"]
    monkeypatch.setitem(compiled_quant.OP.state, "ops", lambda *args: calls.append(1) or kernel(*args))
    texts = corpus_texts[:300]
    frames = dict(counters["frames"])
    got = torch.from_numpy(compiled.encode(texts))
    assert dict(counters["frames"]) == frames  # the graph the build made serves Embedder: no recompile
    compiled_calls = len(calls)
    assert compiled_calls >= 4 * compiled.model.config.num_hidden_layers  # every Linear, every batch
    expected = torch.from_numpy(eager.encode(texts))
    assert len(calls) == compiled_calls  # the eager model never called it
    assert torch.equal(got, expected)


@pytest.fixture
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A process where the kernel was never built, nor the C++ ops that come first (bertlite.quant.ops,
    tests/quant/test_ops.py): what build() decides here stays in this test."""
    state: dict = {}
    monkeypatch.setattr(compiled_quant.OP, "state", state)
    monkeypatch.setattr(ops.OP, "state", {})
    monkeypatch.setenv("BERTLITE_INT8_OPS", "0")
    return state


def tiny_int8(**options) -> nn.Module:
    model = to_bertlite(make_hf_model()).eval()
    return quantize_int8(model, kernel="dequantize", **options)


def int8_layers(model: nn.Module) -> list[Int8Linear]:
    return [m for m in model.modules() if isinstance(m, Int8Linear)]


def test_without_a_working_torch_compile_the_eager_ops_run(monkeypatch, fresh_state) -> None:
    def no_compiler(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

    monkeypatch.setattr(compiled_quant.torch, "compile", no_compiler)
    model = tiny_int8()
    assert not quantization.build_compiled_quantization()
    assert (
        compiled_quant.reason()
        == "torch.compile failed here (RuntimeError: InvalidCxxCompiler: No working C++ compiler found)"
    )
    inputs = random_batch(model.config, batch=2, seq=5)
    with torch.inference_mode():
        got = model(**inputs).last_hidden_state
        for layer in int8_layers(model):
            layer.compiled = False
        assert torch.equal(got, model(**inputs).last_hidden_state)
    with pytest.raises(ValueError, match=r"compile_quantization=True, but it does not work here: torch.compile failed"):
        tiny_int8(compile_quantization=True)


def test_environment_turns_it_off(monkeypatch, fresh_state) -> None:
    monkeypatch.setenv("BERTLITE_INT8_COMPILE", "0")
    assert not any(m.compiled for m in int8_layers(tiny_int8()))
    assert not quantization.build_compiled_quantization()
    with pytest.raises(
        ValueError, match=r"compile_quantization=True, but it does not work here: BERTLITE_INT8_COMPILE=0"
    ):
        tiny_int8(compile_quantization=True)


@pytest.mark.slow
def test_a_kernel_that_disagrees_with_the_eager_ops_is_not_used(monkeypatch, fresh_state) -> None:
    from bertlite.quant import rows

    reference = rows._reference_rows

    def off_by_one(x, input_scale, asymmetric):
        q, scale = reference(x, input_scale, asymmetric)
        return q ^ 1, scale

    monkeypatch.setattr(rows, "_reference_rows", off_by_one)  # the kernel is checked against it
    assert not compiled_quant.build()
    assert compiled_quant.reason() == "its uint8 values differ from the eager ops' on this machine"


def fake_kernel(calls: list, fail: bool = False):
    """A stand-in for the compiled function that records its calls and computes the eager ops."""

    def kernel(x, input_scale, constants):
        calls.append(constants)
        if fail:
            raise RuntimeError("recompile failed")
        asymmetric = bool(constants[0] > 0)
        top, zero_point = (int(constants[3]), 0) if asymmetric else (255, int(constants[1]))
        return quantize_rows(x, input_scale, asymmetric, top, zero_point)

    return kernel


def test_the_kernel_runs_only_without_grad_and_outside_a_recorded_graph(monkeypatch, fresh_state) -> None:
    calls: list = []
    fresh_state.update(ops=fake_kernel(calls), reason=None, faster=True)
    layer = Int8Linear.from_linear(nn.Linear(16, 8), kernel="dequantize", asymmetric=True, compiled=True)
    x = torch.randn(5, 16)
    with torch.no_grad():
        got = layer(x)
        assert len(calls) == 1
        layer.compiled = False
        assert torch.equal(got, layer(x)) and len(calls) == 1
        layer.compiled = True
        monkeypatch.setattr(compiled_quant, "recording_graph", lambda: True)  # trace, export, compile
        layer(x)
    layer(x)  # grad enabled
    assert len(calls) == 1


def test_a_run_time_failure_warns_once_and_falls_back_to_the_same_numbers(fresh_state) -> None:
    calls: list = []
    fresh_state.update(ops=fake_kernel(calls, fail=True), reason=None, faster=True)
    layer = Int8Linear.from_linear(nn.Linear(16, 8), kernel="dequantize", compiled=True)
    x = torch.randn(5, 16)
    eager = quantize_rows(x, None, False, 255, 128)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = layer.quantize_input(x), layer.quantize_input(x)
    notes = [str(w.message) for w in caught if issubclass(w.category, compiled_quant.CompiledQuantizationWarning)]
    assert len(calls) == 1 and len(notes) == 1 and "RuntimeError: recompile failed" in notes[0]
    assert compiled_quant.reason() == "it failed at run time (RuntimeError)"
    assert torch.equal(first[0], eager[0]) and torch.equal(second[0], eager[0])


@pytest.mark.slow
def test_the_input_quantization_is_chosen_when_the_model_is_built(
    monkeypatch, fresh_state, real_model_path: Path, corpus_texts: list[str]
) -> None:
    calls, builds = [], []

    def counted_build():
        builds.append(1)
        return fake_kernel(calls)

    monkeypatch.setattr(compiled_quant, "_load", counted_build)
    monkeypatch.setattr(compiled_quant, "_check", lambda kernel: None)  # the fake computes the eager ops
    eager = Embedder.from_pretrained(real_model_path, dtype="int8")  # nothing built: the eager ops
    assert {m.compiled for m in eager.model.modules() if isinstance(m, Int8Linear)} == {False}
    before = eager.encode(["a short text"])
    eager.encode(corpus_texts[:60])  # thousands of tokens: the first and the last run the same ops
    assert not builds and not calls
    assert (eager.encode(["a short text"]) == before).all()

    assert quantization.build_compiled_quantization() and builds == [1]  # built, then a model quantized
    compiled = Embedder.from_pretrained(real_model_path, dtype="int8")
    linears = sum(isinstance(m, Int8Linear) for m in compiled.model.modules())
    assert calls  # the load held int8 to the job's bar on the calibration texts: through the kernel already
    calls.clear()
    compiled.encode(["a short text"])  # its first token already runs the kernel, every Linear of it
    assert len(calls) == linears
    eager.encode(["a short text"])  # the model built before it keeps the eager ops
    assert len(calls) == linears and builds == [1]


@pytest.mark.parametrize("built", [False, True])
@pytest.mark.slow
def test_bertlite_embed_says_which_quantization_ran(
    monkeypatch, capsys, fresh_state, built, real_model_path: Path, corpus_texts: list[str], tmp_path: Path
) -> None:
    """The command builds nothing of its own: it runs the quantization a script's Embedder runs, and says which."""
    from bertlite.cli import main

    calls: list = []
    monkeypatch.setattr(compiled_quant, "_load", lambda: fake_kernel(calls))
    monkeypatch.setattr(compiled_quant, "_check", lambda kernel: None)  # the fake computes the eager ops
    if built:
        assert quantization.build_compiled_quantization()
    source, out = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("".join(t + "\n" for t in corpus_texts[:6] if "\n" not in t), encoding="utf-8")
    assert main(["embed", str(real_model_path), "-i", str(source), "-o", str(out), "--dtype", "int8", "--quiet"]) == 0
    summary = capsys.readouterr().err
    expected = "(int8, compiled quantization)" if built else "(int8, eager quantization)"
    assert expected in summary and bool(calls) == built
