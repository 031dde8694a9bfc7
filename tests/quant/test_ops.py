"""Int8Linear's passes as C++ ops (bertlite.quant.ops): the eager ops' integers, their outputs within float32
rounding, the same int8 bars, and the eager ops wherever the ops cannot build or run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertlite.jobs.embedder import Embedder
from bertlite.layers.activations import ACT2FN, identity
from bertlite.quant import ops
from bertlite.quant.int8 import Int8Linear, quantize_int8
from bertlite.quant.rows import quantize_rows
from bertlite.utils.measured import ROUNDS, Choice, Rounds, judge
from tests.helpers import NARROWER_WIDTHS, make_hf_model, random_batch, run_at_vector_width, to_bertlite
from tests.quant.test_compiled import every_quantization_form, rows_with_ties
from tests.quant.test_int8 import EIGHT_BIT_BARS, assert_meets_bars


def ops_faster() -> Choice:
    """The timing's verdict where the ops ran twice as fast as the eager ops in every round."""
    rounds = Rounds({"ops": [0.01] * ROUNDS, "eager": [0.02] * ROUNDS})
    return judge(rounds, "ops", "eager")


@pytest.fixture(scope="module")
def built() -> Iterator[bool]:
    """The ops built, checked and used, whatever a timing would say on this CPU and load (the verdict's use is
    tested below with timings of its own); the process's state of the ops comes back after this module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ops.OP, "state", {})
        patch.setattr(ops.OP, "verdict", lambda: ops_faster())
        assert ops.build(), ops.reason()
        yield True


class Counting:
    """torch.ops.bertlite_int8, counting the calls of each op."""

    def __init__(self, library: object) -> None:
        self.library, self.calls = library, {"quantize_rows": 0, "dequantize": 0}

    def __getattr__(self, name: str) -> object:
        op = getattr(self.library, name)

        def counted(*args: object) -> object:
            self.calls[name] += 1
            return op(*args)

        return counted


@pytest.fixture
def counting(built, monkeypatch: pytest.MonkeyPatch) -> Counting:
    counter = Counting(ops.OP.state["ops"])
    monkeypatch.setitem(ops.OP.state, "ops", counter)
    return counter


@every_quantization_form
@pytest.mark.parametrize("skipped", [False, True], ids=["all-channels", "float32-channels"])
def test_quantize_rows_gives_the_eager_integers_bit_for_bit(built, rows, depth, smoothed, asymmetric, grid, skipped):
    zero_point = 0 if asymmetric else grid.zero_point
    x = rows_with_ties(rows, depth, asymmetric, grid.activation_max, zero_point)
    input_scale = torch.rand(depth, generator=torch.Generator().manual_seed(7)) + 0.5 if smoothed else None
    channels = torch.tensor([5, depth // 3, depth - 1]) if skipped else None  # the outlier among them
    before = x.clone()
    got = ops.quantize_rows(x, input_scale, channels, asymmetric, grid.activation_max, zero_point)
    # The eager ops quantize the float32 channels as zeros: Int8Linear zeroes them first.
    reference = x if channels is None else x.index_fill(1, channels, 0.0)
    expected = quantize_rows(reference, input_scale, asymmetric, grid.activation_max, zero_point)
    for value, eager in zip(got[:3], expected, strict=True):
        assert torch.equal(value, eager)
    assert torch.equal(got[3], x[:, channels] if skipped else x[:, :0])  # the float32 channels' inputs, unscaled
    assert torch.equal(x, before)  # the input is left alone


def assert_nan_rows_stay_nan(width: int) -> None:
    """A NaN in a row, wherever it falls (each part of the vector loops, the scalar tail), makes that row's scale
    and minimum NaN, as the eager ops' do; an infinity makes its scale infinite, as theirs; the other rows'
    numbers stay the eager ops'."""
    x = torch.randn(6, width, generator=torch.Generator().manual_seed(3))
    nan_rows = {0: 2, 1: width - 17, 2: width - 1}  # row -> NaN column
    for row, column in nan_rows.items():
        x[row, column] = float("nan")
    x[3, 7] = float("inf")
    for asymmetric, zero_point in ((False, 128), (True, 0)):
        q, scale, low, _ = ops.quantize_rows(x, None, None, asymmetric, 255, zero_point)
        eager_q, eager_scale, eager_low = quantize_rows(x, None, asymmetric, 255, zero_point)
        rows = list(nan_rows)
        assert scale[rows].isnan().all() and low[rows].isnan().all() and eager_scale[rows].isnan().all()
        assert scale[3].isinf().all() and eager_scale[3].isinf().all()
        assert torch.equal(q[4:], eager_q[4:]) and torch.equal(scale[4:], eager_scale[4:])


def test_a_nan_in_a_row_makes_its_scale_nan(built) -> None:
    assert_nan_rows_stay_nan(401)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("offset", [False, True])
@pytest.mark.parametrize(("activation", "residual"), [(None, False), (None, True), ("gelu", False)])
@pytest.mark.parametrize("channels", [0, 2], ids=["int8-only", "float32-channels"])
def test_dequantize_gives_the_eager_outputs_within_float32_rounding(
    built, activation, bias, offset, residual, channels
):
    generator = torch.Generator().manual_seed(3)
    rows, width = 37, 401  # a width that leaves the vector loop a scalar tail
    products = torch.randn(rows, width, generator=generator) * 300
    scale = torch.rand(rows, 1, generator=generator) * 0.02
    offsets = torch.randn(rows, 1, generator=generator) if offset else None
    row_sums = torch.randn(width, generator=generator) if offset else None
    biases = torch.randn(width, generator=generator) if bias else None
    added = torch.randn(rows, width, generator=generator) if residual else None
    expected = products * scale
    expected = expected + added if residual else expected
    expected = expected + biases if bias and not residual else expected
    expected = expected + offsets * row_sums if offset else expected
    expected = expected + biases if bias and residual else expected
    kept = torch.randn(rows, channels, generator=generator) * 20 if channels else None
    kept_weight = torch.randn(channels, width, generator=generator) if channels else None
    expected = torch.addmm(expected, kept, kept_weight) if channels else expected
    got = products.clone()
    assert ops.dequantize(got, scale, offsets, row_sums, biases, added, activation, kept, kept_weight) is got
    # The float32 channels' products sum in another order than addmm's: two roundings of the largest value.
    atol = 2.4e-7 * float(expected.abs().max()) if channels else 1e-6
    if activation and channels:  # GELU's slope is at most 1.13: its input's rounding, plus its own bound
        exact = F.gelu(expected.double())
        torch.testing.assert_close(got.double(), exact, rtol=2.4e-7, atol=1.5e-6 + 1.13 * atol)
    elif activation:
        assert_gelu_close(got, expected)
    else:
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=atol)


def assert_gelu_close(got: torch.Tensor, before: torch.Tensor) -> None:
    """got is GELU of `before` as accurately as torch's float32 GELU is: both within 1.5e-6 (their erf
    approximations) plus two float32 roundings of the result, of the float64 GELU."""
    exact = F.gelu(before.double())
    bound = 1.5e-6 + 2.4e-7 * exact.abs()
    for name, values in (("bertlite.quant.ops", got), ("torch", F.gelu(before))):
        excess = (values.double() - exact).abs() - bound
        at = int(excess.argmax())
        assert float(excess.max()) <= 0, f"{name}'s GELU of {float(before.flatten()[at])} is off by {excess.max():.3g}"


def test_gelu_is_torchs_over_its_whole_range(built) -> None:
    y = torch.cat([torch.linspace(-40, 40, 200_001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30])])
    got = ops.dequantize(y.clone()[None], torch.ones(1, 1), None, None, None, None, "gelu")[0]
    assert_gelu_close(got, y)
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("residual", [False, True])
def test_int8_linear_with_the_ops_gives_its_eager_outputs(counting, asymmetric, outliers, activation, residual):
    torch.manual_seed(0)
    linear = nn.Linear(96, 80)
    channels = torch.tensor([3, 50]) if outliers else None
    layer = Int8Linear.from_linear(linear, kernel="dequantize", asymmetric=asymmetric, outlier_channels=channels)
    layer.activation = activation
    x = torch.randn(2, 13, 96)
    x[..., 3] *= 30
    added = torch.randn(2, 13, 80) if residual else None
    with torch.inference_mode():
        layer.compiled = False
        expected = layer(x, residual=added)
        assert counting.calls == {"quantize_rows": 0, "dequantize": 0}
        layer.compiled = True
        got = layer(x, residual=added)
    assert counting.calls == {"quantize_rows": 1, "dequantize": 1}
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with torch.enable_grad():  # int8 is inference only: with grad the eager ops run
        layer(x, residual=added)
    assert counting.calls == {"quantize_rows": 1, "dequantize": 1}


def test_the_intermediate_applies_the_activation_itself(built) -> None:
    plain = to_bertlite(make_hf_model()).eval()
    model = quantize_int8(to_bertlite(make_hf_model()).eval(), kernel="dequantize", compile_quantization=True)
    for layer in model.encoder.layer:
        assert layer.intermediate.dense.activation == "gelu" and layer.intermediate.intermediate_act_fn is identity
        assert layer.output.dense.activation is None
    inputs = random_batch(model.config, batch=3, seq=7)
    with torch.inference_mode():
        got = model(**inputs).last_hidden_state
        for module in model.modules():
            if isinstance(module, Int8Linear):
                module.compiled = False
        eager = model(**inputs).last_hidden_state
        float32 = plain(**inputs).last_hidden_state
    torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-4)
    assert F.cosine_similarity(got.flatten(1), float32.flatten(1)).min() > 0.99
    assert ACT2FN[model.config.hidden_act] is F.gelu  # the activation the ops compute


@pytest.mark.slow
def test_int8_vectors_with_the_ops_meet_the_bars_and_the_eager_vectors(
    built, real_model_path: Path, corpus_texts: list[str], counting: Counting
) -> None:
    from tests.quant.test_int8 import TINY_TEXTS

    texts = corpus_texts[:500] + TINY_TEXTS
    fast = Embedder.from_pretrained(real_model_path, dtype="int8")
    eager = Embedder.from_pretrained(real_model_path, dtype="float32")
    quantize_int8(eager.model, eager.tokenizer, compile_quantization=False)
    got = fast.encode(texts)
    assert counting.calls["dequantize"] >= 4 * fast.model.config.num_hidden_layers
    calls = dict(counting.calls)
    expected = eager.encode(texts)
    assert counting.calls == calls  # the eager model never called them
    # Both are int8's rounding of the same model: a code one step off (float32 rounding landing elsewhere) moves
    # a text of 2-3 tokens by up to 1e-3, as much as the eager ops' own distance to float32 allows.
    between = (got * expected).sum(axis=1)  # both normalized
    assert float(between.min()) > 0.998 and float(between.mean()) > 0.9998
    fp32 = Embedder.from_pretrained(real_model_path, dtype="float32").encode(texts)
    assert_meets_bars(got, fp32, EIGHT_BIT_BARS)
    # ... and as close to float32 as the eager ops, on average over the texts
    assert abs(float((got * fp32).sum(axis=1).mean() - (expected * fp32).sum(axis=1).mean())) < 5e-5
    assert np.isfinite(got).all()


@pytest.fixture
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A process where the ops were never built: what build() decides here stays in this test."""
    state: dict = {}
    monkeypatch.setattr(ops.OP, "state", state)
    return state


def test_without_a_compiler_the_eager_ops_run(monkeypatch, fresh_state) -> None:
    from torch.utils import cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    assert not ops.build()
    assert ops.reason() == "its C++ build failed here (RuntimeError: Ninja is required to load C++ extensions)"
    assert not ops.usable()


def test_environment_turns_them_off(monkeypatch, fresh_state) -> None:
    monkeypatch.setenv("BERTLITE_INT8_OPS", "0")
    assert not ops.build()
    assert ops.reason() == "BERTLITE_INT8_OPS=0 or BERTLITE_INT8_COMPILE=0"


def test_ops_that_disagree_with_the_eager_ops_are_not_used(built, monkeypatch, fresh_state) -> None:
    library = torch.ops.bertlite_int8

    class OffByOne:
        def quantize_rows(self, *args):
            q, scale, low, kept = library.quantize_rows(*args)
            return q.add(1).clamp(max=255).to(torch.uint8), scale, low, kept

        def dequantize(self, *args):
            return library.dequantize(*args)

    monkeypatch.setattr(ops, "_load", OffByOne)
    assert not ops.build()
    assert ops.reason() == "its uint8 values differ from the eager ops' on this machine"


def test_ops_timed_slower_than_the_eager_ops_are_not_used(built, monkeypatch, fresh_state) -> None:
    rounds = Rounds({"ops": [2e-3] * 5, "eager": [1e-3] * 5})
    slower = Choice("ops", "eager", rounds, picked="eager", why="decided")
    monkeypatch.setattr(ops.OP, "verdict", lambda: slower)
    assert not ops.build()
    assert ops.reason() == f"timed slower than the eager ops on this CPU ({slower.summary()})"
    assert "eager ran 2.00x ops" in ops.reason()


def test_the_timing_races_the_ops_against_the_eager_ops(built, monkeypatch) -> None:
    from bertlite.utils import measured

    monkeypatch.setattr(measured, "MIN_SHARE", 0.0)  # every round counts, however busy the machine ...
    monkeypatch.setattr(measured, "BUDGET_SECONDS", float("inf"))  # ... and slow
    rounds = ops.time_passes(torch.ops.bertlite_int8)
    assert set(rounds.seconds) == {"ops", "eager"} and rounds.busy == 0
    assert all(len(s) == ROUNDS and all(0 < x < float("inf") for x in s) for s in rounds.seconds.values())


# Each narrower vector width's build (ops.cpp's AVX2 and portable code paths), held to the same eager reference.
WIDTH_CHECK = """
import torch
from bertlite.quant import ops
from bertlite.quant.rows import quantize_rows
from tests.quant.test_compiled import rows_with_ties
from tests.quant.test_ops import assert_gelu_close, assert_nan_rows_stay_nan, ops_faster
ops.OP.verdict = lambda: ops_faster()  # checked here, not timed: a busy machine decides nothing
assert ops.build(), ops.reason()
assert_nan_rows_stay_nan(401)
for asymmetric, zero_point in ((False, 128), (True, 0)):
    x = rows_with_ties(257, 401, asymmetric, 255, zero_point)
    channels = torch.tensor([5, 133, 400])
    got = ops.quantize_rows(x, None, channels, asymmetric, 255, zero_point)
    expected = quantize_rows(x.index_fill(1, channels, 0.0), None, asymmetric, 255, zero_point)
    assert all(torch.equal(a, b) for a, b in zip(got, expected)), asymmetric
    assert torch.equal(got[3], x[:, channels])
y = torch.linspace(-40, 40, 100_003)[None]
assert_gelu_close(ops.dequantize(y.clone(), torch.ones(1, 1), None, None, None, None, "gelu"), y)
print(torch.backends.cpu.get_cpu_capability(), "ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("width", NARROWER_WIDTHS)
def test_each_narrower_vector_width_gives_the_eager_numbers(width: str) -> None:
    run_at_vector_width(width, WIDTH_CHECK)
