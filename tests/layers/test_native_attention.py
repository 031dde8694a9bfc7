"""The packed attention as one C++ op (bertlite.layers.native_attention, attention "varlen" on the CPU): each
sequence's softmax(q.k) v within float32 rounding of a float64 reference, as close as torch's SDPA; models that
run it match transformers; optimize installs it only where it was built and timed faster; int8 keeps its bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bertlite.errors import AttentionUnavailableError
from bertlite.jobs.embedder import Embedder
from bertlite.layers import native_attention
from bertlite.layers.attention import (
    packed_eager_attention,
    packed_per_sequence_attention,
    packed_windowed_attention,
    window_bias,
)
from bertlite.layers.onednn import optimize
from bertlite.layers.packing import PackedLayout
from bertlite.utils import measured
from bertlite.utils.measured import ROUNDS, Rounds
from tests.helpers import (
    NARROWER_WIDTHS,
    make_hf_model,
    packed_inputs,
    random_batch,
    real_tokens,
    run_at_vector_width,
    to_bertlite,
)
from tests.quant.test_int8 import EIGHT_BIT_BARS, assert_meets_bars


@pytest.fixture(scope="module")
def available() -> bool:
    assert native_attention.available(), native_attention.reason()
    return True


@pytest.fixture
def chosen(available, monkeypatch: pytest.MonkeyPatch) -> None:
    """As where build() timed the op faster: models made ready in this test run it."""
    monkeypatch.setitem(native_attention.OP.state, "faster", True)


def errors(qkv: torch.Tensor, layout: PackedLayout, heads: int, window: int | None = None) -> tuple[float, float]:
    """The op's and SDPA's largest distance to the float64 reference, over the reference's largest value; with
    a sliding window (each query sees the keys at most `window` positions away) when given."""
    scaling = (qkv.shape[1] // 3 // heads) ** -0.5
    grid = range(layout.max_length)
    bias = None if window is None else window_bias(grid, grid, window, qkv.double())[None, None]
    exact, _ = packed_eager_attention(qkv.double(), layout, heads, scaling, 0.0, bias)
    ours = native_attention.packed_attention(qkv, layout, heads, scaling, window)
    if window is None:
        sdpa, _ = packed_per_sequence_attention(qkv, layout, heads, scaling, 0.0)
    else:
        sdpa, _ = packed_windowed_attention(qkv, layout, heads, scaling, 0.0, window)
    top = float(exact.abs().max())
    return float((ours.double() - exact).abs().max()) / top, float((sdpa.double() - exact).abs().max()) / top


# Lengths on both sides of the vector widths (8, 16), of the 4-query blocks and of the 64-query work items.
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129, 300]


@pytest.mark.parametrize(("heads", "head_size"), [(12, 32), (4, 64), (2, 20), (1, 8), (3, 80)], ids=lambda v: str(v))
def test_the_op_is_as_close_to_exact_attention_as_sdpa(available, heads: int, head_size: int) -> None:
    generator = torch.Generator().manual_seed(heads * head_size)
    layout = PackedLayout.from_lengths(torch.tensor(LENGTHS))
    qkv = torch.randn(sum(LENGTHS), 3 * heads * head_size, generator=generator) * 3
    ours, sdpa = errors(qkv, layout, heads)
    assert ours <= max(2 * sdpa, 2e-6), (ours, sdpa)


# Windows of no other key, of fewer keys than a vector, across a 64-query block's edge, wider than most texts.
@pytest.mark.parametrize("window", [0, 1, 5, 16, 64, 200])
def test_a_sliding_window_is_as_close_to_exact_attention_as_sdpa(available, window: int) -> None:
    generator = torch.Generator().manual_seed(window)
    layout = PackedLayout.from_lengths(torch.tensor(LENGTHS))
    qkv = torch.randn(sum(LENGTHS), 3 * 3 * 32, generator=generator) * 3
    ours, sdpa = errors(qkv, layout, 3, window)
    assert ours <= max(2 * sdpa, 2e-6), (ours, sdpa)


def test_sharp_and_flat_softmax_rows_stay_finite_and_exact(available) -> None:
    # Scores of +-1e4 (one key takes all the weight) and all-equal rows (uniform weights).
    generator = torch.Generator().manual_seed(1)
    layout = PackedLayout.from_lengths(torch.tensor([40, 9]))
    qkv = torch.randn(49, 3 * 2 * 32, generator=generator) * 40
    qkv[40:, : 2 * 32] = 0.0  # the second sequence's queries: every score 0
    ours, sdpa = errors(qkv, layout, 2)
    assert ours <= max(2 * sdpa, 2e-6), (ours, sdpa)
    assert torch.isfinite(native_attention.packed_attention(qkv, layout, 2, 32**-0.5)).all()


def test_rows_with_a_wider_stride_give_the_same_context_bit_for_bit(available) -> None:
    generator = torch.Generator().manual_seed(2)
    layout = PackedLayout.from_lengths(torch.tensor([33, 5, 70]))
    wide = torch.randn(108, 3 * 4 * 32 + 17, generator=generator)
    qkv = wide[:, : 3 * 4 * 32]  # a view whose rows are 3H + 17 floats apart
    assert not qkv.is_contiguous()
    got = native_attention.packed_attention(qkv, layout, 4, 32**-0.5)
    assert torch.equal(got, native_attention.packed_attention(qkv.contiguous(), layout, 4, 32**-0.5))


@pytest.mark.parametrize("config", [{}, {"num_attention_heads": 2, "hidden_size": 40}], ids=["bert", "odd-head-size"])
def test_a_model_with_varlen_attention_matches_transformers(available, config: dict) -> None:
    hf = make_hf_model(attn="eager", **config)
    ours = to_bertlite(hf, attn="varlen")
    batch = random_batch(hf.config, batch=5, seq=21)
    with torch.no_grad():
        out = ours(**packed_inputs(batch))
        reference = hf(**batch)
    expected = real_tokens(reference.last_hidden_state, batch)
    torch.testing.assert_close(out.last_hidden_state, expected, atol=1e-5, rtol=1e-5)


def test_a_forward_that_records_gradients_runs_auto_and_trains(available) -> None:
    hf = make_hf_model(attn="eager")
    batch = packed_inputs(random_batch(hf.config, batch=3, seq=11))
    grads = {}
    for attn in ("varlen", "auto"):
        model = to_bertlite(hf, attn=attn).eval()  # no dropout: the same forward twice
        model(**batch).last_hidden_state.square().sum().backward()
        grads[attn] = model.embeddings.word_embeddings.weight.grad
    assert grads["varlen"] is not None and float(grads["varlen"].abs().sum()) > 0
    torch.testing.assert_close(grads["varlen"], grads["auto"], atol=1e-6, rtol=1e-5)


def test_a_forward_recorded_into_a_graph_runs_auto(available, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.compile, torch.export and tracing record SDPA: the op has no graph form.
    import bertlite.utils.graph

    def not_in_a_graph(*args: object) -> None:
        raise AssertionError("the C++ op ran while a graph was recorded")

    hf = make_hf_model(attn="eager")
    batch = packed_inputs(random_batch(hf.config, batch=3, seq=9))
    with torch.no_grad():
        expected = to_bertlite(hf, attn="auto")(**batch).last_hidden_state
        monkeypatch.setattr(bertlite.utils.graph, "recording_graph", lambda: True)
        monkeypatch.setattr(native_attention, "packed_attention", not_in_a_graph)
        got = to_bertlite(hf, attn="varlen")(**batch).last_hidden_state
    assert torch.equal(got, expected)


def test_optimize_installs_varlen_only_where_the_op_was_chosen(available, monkeypatch: pytest.MonkeyPatch) -> None:
    hf = make_hf_model(attn="eager")
    monkeypatch.setitem(native_attention.OP.state, "faster", False)
    assert optimize(to_bertlite(hf, attn="sdpa")).attn_implementation == "auto"
    monkeypatch.setitem(native_attention.OP.state, "faster", True)
    fast = optimize(to_bertlite(hf, attn="sdpa"))
    assert fast.attn_implementation == "varlen"
    batch = random_batch(hf.config, batch=4, seq=17)
    with torch.no_grad():
        got = fast(**packed_inputs(batch)).last_hidden_state
        expected = real_tokens(hf(**batch).last_hidden_state, batch)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_varlen_where_the_op_is_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_attention.OP, "state", {"ops": None, "reason": "BERTLITE_NATIVE_ATTENTION=0"})
    model = to_bertlite(make_hf_model(), attn="varlen")
    with pytest.raises(AttentionUnavailableError, match=r"C\+\+ attention.*BERTLITE_NATIVE_ATTENTION=0; use 'auto'"):
        with torch.no_grad():
            model(input_ids=torch.tensor([5, 6, 7, 8]), lengths=torch.tensor([3, 1]))


def test_the_environment_switch_and_a_failed_build_keep_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils import cpp_extension

    monkeypatch.setenv("BERTLITE_NATIVE_ATTENTION", "0")
    assert native_attention.OP._load_checked() == (None, "BERTLITE_NATIVE_ATTENTION=0")
    monkeypatch.delenv("BERTLITE_NATIVE_ATTENTION")

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    state: dict = {}
    monkeypatch.setattr(native_attention.OP, "state", state)
    assert not native_attention.build()
    assert native_attention.reason() == (
        "its C++ build failed here (RuntimeError: Ninja is required to load C++ extensions)"
    )
    assert optimize(to_bertlite(make_hf_model(), attn="sdpa")).attn_implementation == "auto"


def test_an_op_that_disagrees_with_sdpa_is_not_used(available, monkeypatch: pytest.MonkeyPatch) -> None:
    class Shifted:
        @staticmethod
        def packed_attention(qkv, cu_seqlens, heads, scale, window):  # noqa: ANN001, ANN205
            return torch.ops.bertlite_attention.packed_attention(qkv, cu_seqlens, heads, scale, window) + 1e-3

    monkeypatch.setattr(native_attention, "_load", lambda: Shifted)
    monkeypatch.setattr(native_attention.OP, "state", {})
    assert native_attention.OP._load_checked() == (None, "its outputs differ from SDPA's on this machine")


def rounds_of(native_x: float | None) -> Rounds:
    """Rounds in which the op ran native_x times as fast as SDPA; None: every round dropped (a busy machine)."""
    if native_x is None:
        return Rounds({"native": [], "sdpa": []}, busy=41)
    return Rounds({"native": [0.01] * ROUNDS, "sdpa": [0.01 * native_x] * ROUNDS})


@pytest.fixture
def attention_timing(available, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """attention_timing(native_x): build() times again, and its timing gives rounds_of(native_x) whatever the load
    and the CPU, with nothing kept yet (a cache folder of the test's own). Returns the list of timings taken."""
    monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(measured, "_decided", {})
    for key in ("faster", "timed"):  # conftest's native_attention_choice puts them back
        monkeypatch.delitem(native_attention.OP.state, key, raising=False)
    timed: list[object] = []

    def use(native_x: float | None) -> list[object]:
        monkeypatch.setattr(native_attention, "time_attention", lambda ops: timed.append(ops) or rounds_of(native_x))
        return timed

    return use


@pytest.mark.parametrize(
    ("native_x", "native", "summary"),
    [
        (
            2.0,
            True,
            "varlen: bertlite's C++ attention over the packed rows (sdpa ran 0.50x native (0.50-0.50x over 5 rounds): "
            "native (sdpa is picked at >= 1.10x in every round))",
        ),
        (
            0.5,
            False,
            "auto: SDPA per run of equal lengths (timed slower than SDPA on this CPU (sdpa ran 2.00x native "
            "(2.00-2.00x over 5 rounds): sdpa (sdpa is picked at >= 1.10x in every round)))",
        ),
        (
            None,
            True,
            "varlen: bertlite's C++ attention over the packed rows (no round counted (41 dropped: other processes had "
            "the CPU): native, not kept: 0 of 5 rounds counted in the time allowed (try 1 of 3))",
        ),
    ],
    ids=["op-faster", "sdpa-faster", "every-round-busy"],
)
def test_env_says_whether_long_jobs_run_the_op_and_why(
    attention_timing, native_x: float | None, native: bool, summary: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from bertlite.cli import main

    timed = attention_timing(native_x)
    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["cpu_attention"]
    assert report == {"native": native, "summary": summary}
    assert native_attention.built() == report["native"] and len(timed) == 1
    assert main(["env"]) == 0  # the verdict of this process: not timed again
    assert f"attention on cpu: {summary}\n" in capsys.readouterr().out
    assert len(timed) == 1


def test_the_timing_runs_both_forms_in_rounds(available, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measured, "MIN_SHARE", 0.0)  # every round counts, however busy the machine ...
    monkeypatch.setattr(measured, "BUDGET_SECONDS", float("inf"))  # ... and slow
    rounds = native_attention.time_attention(torch.ops.bertlite_attention)
    assert set(rounds.seconds) == {"native", "sdpa"} and rounds.busy == 0
    assert all(len(s) == ROUNDS and all(0 < x < float("inf") for x in s) for s in rounds.seconds.values())


@pytest.mark.slow
def test_embedder_vectors_with_the_op_match_sentence_transformers(
    chosen, real_model_path: Path, corpus_texts: list[str]
) -> None:
    from sentence_transformers import SentenceTransformer

    texts = corpus_texts[:300]
    embedder = Embedder.from_pretrained(real_model_path, dtype="float32")
    assert embedder.model.attn_implementation == "auto"  # float32 keeps one SDPA call per text by default
    embedder.model.set_attn_implementation("varlen")  # the op, asked for by name
    got = embedder.encode(texts)
    expected = SentenceTransformer(str(real_model_path), device="cpu").encode(texts)
    np.testing.assert_allclose(got, expected, atol=2e-6, rtol=0)


@pytest.mark.slow
def test_int8_with_the_op_meets_the_bars(chosen, real_model_path: Path, corpus_texts: list[str]) -> None:
    from tests.quant.test_int8 import TINY_TEXTS

    texts = corpus_texts[:500] + TINY_TEXTS
    int8 = Embedder.from_pretrained(real_model_path, dtype="int8")
    assert int8.model.attn_implementation == "varlen"
    fp32 = Embedder.from_pretrained(real_model_path, dtype="float32")
    assert_meets_bars(int8.encode(texts), fp32.encode(texts), EIGHT_BIT_BARS)


# Each narrower vector width's build (attention.cpp's AVX2 and portable code paths), held to the same reference.
WIDTH_CHECK = """
import torch
from bertlite.layers import native_attention
from bertlite.layers.packing import PackedLayout
from tests.layers.test_native_attention import LENGTHS, errors
assert native_attention.available(), native_attention.reason()
for heads, head_size in ((12, 32), (2, 20), (3, 80)):
    layout = PackedLayout.from_lengths(torch.tensor(LENGTHS))
    qkv = torch.randn(sum(LENGTHS), 3 * heads * head_size, generator=torch.Generator().manual_seed(0)) * 3
    for window in (None, 5, 70):
        ours, sdpa = errors(qkv, layout, heads, window)
        assert ours <= max(2 * sdpa, 2e-6), (heads, head_size, window, ours, sdpa)
print(torch.backends.cpu.get_cpu_capability(), "ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("width", NARROWER_WIDTHS)
def test_each_narrower_vector_width_is_as_close_as_sdpa(width: str) -> None:
    run_at_vector_width(width, WIDTH_CHECK)
