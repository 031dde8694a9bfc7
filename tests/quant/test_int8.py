"""The int8 path: Int8Linear against F.linear, the quantized model's vectors against fp32, the refusals."""

from __future__ import annotations

import json
import platform
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertlite.cli import main
from bertlite.jobs.embedder import Embedder
from bertlite.quant import int8 as quantization
from bertlite.quant import kernels, rows
from bertlite.quant.int8 import (
    CALIBRATION_TEXTS,
    INT8_KERNELS,
    FusedIntoQKV,
    Int8Linear,
    int8_kernel_available,
    quantize_int8,
)
from bertlite.tokenization import load_tokenizer
from tests.helpers import make_hf_model, random_batch, run_fresh_without_isa_caps, to_bertlite

# The int8 kernel "auto" picks here (int_mm, skipped by needs(), where no int8 kernel runs).
FUSED = next((k for k in INT8_KERNELS if k != "dequantize" and int8_kernel_available(k)), "int_mm")


def needs(kernel: str) -> None:
    if not int8_kernel_available(kernel):
        pytest.skip(f"the {kernel} int8 kernel does not run on this machine")


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).norm() / expected.norm())


# --- Int8Linear ------------------------------------------------------------------------


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("kernel", INT8_KERNELS)
def test_gemm_is_the_exact_int8_product(kernel: str, asymmetric: bool) -> None:
    needs(kernel)
    g = torch.Generator().manual_seed(0)
    linear = nn.Linear(96, 40)
    q = Int8Linear.from_linear(linear, kernel=kernel, asymmetric=asymmetric)
    top, zero_point = q.grid.activation_max, q.zero_point
    # asymmetric inputs span [0, top] from each token's min: oneDNN takes them uncentred (no source zero point)
    assert zero_point == (0 if asymmetric and kernel in ("onednn", "dequantize") else q.grid.zero_point)
    qx = torch.randint(0, top + 1, (37, 96), dtype=torch.uint8, generator=g)
    qx[0] = top
    # the integers the kernel holds (oneDNN keeps only its packed copy): its grid's quantization of the weight
    weight = quantization.quantize_per_channel(linear.weight.detach(), q.grid.weight_limit, q.grid.pair_limit)[0]
    exact = ((qx.to(torch.int64) - zero_point) @ weight.to(torch.int64).T).to(torch.float64) * q.weight_scale.double()
    tolerance = 1e-6 if kernel != "dequantize" else 1e-4  # dequantize: an fp32 GEMM on W * scale, rounded
    torch.testing.assert_close(q.gemm(qx).double(), exact, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("kernel", INT8_KERNELS)
def test_int8_linear_is_close_to_f_linear(kernel: str, asymmetric: bool) -> None:
    needs(kernel)
    torch.manual_seed(0)
    linear = nn.Linear(128, 48)
    x = torch.randn(4, 9, 128)  # padded (B, T, H) input
    q = Int8Linear.from_linear(linear, kernel=kernel, asymmetric=asymmetric)
    with torch.no_grad():
        expected = F.linear(x, linear.weight, linear.bias)
    got = q(x)
    assert got.shape == (4, 9, 48) and got.dtype == torch.float32
    # Per-token int8 activations x per-channel int8 weights: about 1% on Gaussian data (measured 0.8-1.0%).
    assert relative_error(got, expected) < 0.02
    torch.testing.assert_close(q(x.reshape(36, 128)), got.reshape(36, 48))  # packed (N, H) rows: the same


def test_fused_and_fallback_kernels_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    needs(FUSED)
    # the fallback on the fused kernel's grid (bounded pairs on a CPU without VNNI), so only the kernels differ
    monkeypatch.setitem(kernels._grids, "dequantize", quantization.int8_grid(FUSED))
    torch.manual_seed(1)
    linear = nn.Linear(64, 72)
    x = torch.randn(50, 64)
    fused = Int8Linear.from_linear(linear, kernel=FUSED)(x)
    fallback = Int8Linear.from_linear(linear, kernel="dequantize")(x)
    torch.testing.assert_close(fused, fallback, rtol=1e-4, atol=1e-5)


def test_asymmetric_halves_the_error_on_one_sided_input() -> None:
    needs(FUSED)
    torch.manual_seed(2)
    linear = nn.Linear(256, 64)
    x = F.gelu(torch.randn(64, 256) * 2)  # what output.dense gets: GELU's output, mostly >= 0
    grid = quantization.int8_grid(FUSED)
    weight, scale = quantization.quantize_per_channel(linear.weight.detach(), grid.weight_limit, grid.pair_limit)
    with torch.no_grad():  # the quantized weight's product: what remains is the activations' error
        expected = F.linear(x, weight.to(torch.float32) * scale[:, None], linear.bias)
    symmetric = relative_error(Int8Linear.from_linear(linear, kernel=FUSED)(x), expected)
    asymmetric = relative_error(Int8Linear.from_linear(linear, kernel=FUSED, asymmetric=True)(x), expected)
    assert asymmetric < 0.6 * symmetric


def test_smoothing_keeps_an_outlier_channel_from_costing_every_other() -> None:
    needs(FUSED)
    torch.manual_seed(3)
    linear = nn.Linear(128, 64)
    x = torch.randn(64, 128)
    x[:, 5] *= 60  # one channel far larger than the rest, in every token (BERT has such channels)
    with torch.no_grad():
        expected = F.linear(x, linear.weight, linear.bias)
    smooth = x.abs().amax(dim=0).sqrt() / linear.weight.detach().abs().amax(dim=0).sqrt()  # alpha 0.5
    plain = relative_error(Int8Linear.from_linear(linear, kernel=FUSED)(x), expected)
    smoothed = relative_error(Int8Linear.from_linear(linear, smooth, kernel=FUSED)(x), expected)
    assert smoothed < 0.5 * plain


@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("fused_round", [True, False])
def test_quantize_input_rounds_to_nearest_and_leaves_the_input_alone(
    monkeypatch: pytest.MonkeyPatch, fused_round: bool, asymmetric: bool, smooth: bool
) -> None:
    rows._round_to_uint8(torch.zeros(1), 0)  # probes the one-pass rounding once
    if fused_round and not rows._fused_round["quantize_per_tensor"]:
        pytest.skip("this torch has no quantize_per_tensor: only the fallback rounding runs here")
    monkeypatch.setitem(rows._fused_round, "quantize_per_tensor", fused_round)
    torch.manual_seed(4)
    x = torch.randn(20, 64) * 3
    x[3] = F.gelu(x[3])  # one one-sided row
    before = x.clone()
    smoothing = torch.rand(64) + 0.5 if smooth else None
    q = Int8Linear.from_linear(nn.Linear(64, 8), smoothing, kernel="dequantize", asymmetric=asymmetric)
    qx, scale, offset = q.quantize_input(x)
    assert torch.equal(x, before)  # the caller's tensor (a residual, say) is never written
    assert qx.dtype == torch.uint8 and q.zero_point == (0 if asymmetric else 128)  # oneDNN's u8 path
    real = x.double() / smoothing.double() if smooth else x.double()
    restored = scale.double() * (qx.double() - q.zero_point) + (offset.double() if asymmetric else 0)
    # round to nearest: every value within half a step (truncation would leave up to a whole step)
    assert bool(((restored - real).abs() <= scale.double() * (0.5 + 1e-4)).all())


def test_wrong_input_width_is_named() -> None:
    q = Int8Linear.from_linear(nn.Linear(16, 8), kernel="dequantize")
    with pytest.raises(ValueError, match=r"expects \(\.\.\., 16\) input, got \(3, 12\)"):
        q(torch.randn(3, 12))
    with pytest.raises(ValueError, match=r"residual must be \(3, 8\), got \(3, 7\)"):
        q(torch.randn(3, 16), residual=torch.randn(3, 7))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("asymmetric", [False, True])
def test_a_residual_given_to_the_layer_is_added_once(asymmetric: bool, bias: bool) -> None:
    needs(FUSED)
    torch.manual_seed(6)
    q = Int8Linear.from_linear(nn.Linear(64, 32, bias=bias), kernel=FUSED, asymmetric=asymmetric)
    x, residual = torch.randn(2, 5, 64), torch.randn(2, 5, 32)
    before = residual.clone()
    torch.testing.assert_close(q(x, residual=residual), q(x) + residual, rtol=1e-6, atol=1e-6)
    assert torch.equal(residual, before)  # the residual stream is read, never written
    torch.testing.assert_close(q(x[:, :0], residual=residual[:, :0]), residual[:, :0])  # no tokens


@pytest.mark.slow
def test_the_quantized_layers_add_the_residual_in_eval_and_leave_training_to_the_plain_path() -> None:
    model = to_bertlite(make_hf_model()).eval()
    quantize_int8(model, kernel="dequantize")
    inputs = random_batch(model.config, batch=2, seq=7)
    seen = []
    for layer in model.modules():
        if isinstance(layer, Int8Linear):
            layer.register_forward_hook(
                lambda m, args, kwargs, out: seen.append("residual" in kwargs), with_kwargs=True
            )
    with torch.no_grad():
        fused = model(**inputs).last_hidden_state
        assert seen.count(True) == 2 * model.config.num_hidden_layers  # attention.output.dense, output.dense
        seen.clear()
        model.train()  # dropout runs between dense and the residual add: the unfused path
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        plain = model(**inputs).last_hidden_state
    assert not any(seen)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)


def _saturating_gemm(x: torch.Tensor, zero_point: int, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x86's int8 dot product without VNNI (vpmaddubsw): u8 x s8 products summed in pairs, saturated to int16."""
    pairs = (x.to(torch.int32)[:, None, :] * weight.to(torch.int32)[None]).view(len(x), len(weight), -1, 2).sum(-1)
    total = pairs.clamp(-32768, 32767).sum(-1) - zero_point * weight.to(torch.int32).sum(1)
    return total.to(torch.float32) * scale


def _linear_and_reference(wide_pair: bool = False) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A 64 -> 16 Linear, 8 random inputs and their fp32 output; wide_pair: one pair of weights at each
    row's largest value, which a saturating kernel could not take as 127 + 127."""
    torch.manual_seed(5)
    linear = nn.Linear(64, 16)
    if wide_pair:
        with torch.no_grad():
            linear.weight[:, 6:8] = 0.3
    x = torch.randn(8, 64)
    with torch.no_grad():
        return linear, x, F.linear(x, linear.weight, linear.bias)


def test_a_kernel_that_saturates_at_8_bits_gets_weights_whose_pairs_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kernels._GEMMS, "int_mm", _saturating_gemm)
    monkeypatch.setattr(kernels, "_grids", {})
    assert quantization.int8_grid("int_mm") == quantization.Int8Grid(255, 127, pair_limit=128)
    linear, x, expected = _linear_and_reference(wide_pair=True)
    for asymmetric in (False, True):
        q = Int8Linear.from_linear(linear, kernel="int_mm", asymmetric=asymmetric)
        qx = q.quantize_input(x)[0]
        pairs = q.weight.to(torch.int32).view(16, 32, 2)
        assert int(qx.max()) == 255 and q.grid.zero_point == 128  # 8-bit activations
        assert int(pairs.clamp(min=0).sum(-1).max()) <= 128 and int(pairs.clamp(max=0).sum(-1).min()) >= -128
        assert int(pairs.clamp(min=0).sum(-1).max()) >= 127  # the widest pair is what sets each row's scale
        exact = ((qx.to(torch.int64) - 128) @ q.weight.to(torch.int64).T).to(torch.float32) * q.weight_scale
        torch.testing.assert_close(q.gemm(qx), exact)  # no pair saturated
        assert relative_error(q(x), expected) < 0.03
    with pytest.raises(ValueError, match=r"pairs \(k, k \+ 1\) sum to at most 128 per sign; got a pair summing to 200"):
        Int8Linear(torch.full((4, 64), 100, dtype=torch.int8), torch.ones(4), None, kernel="int_mm")


# Run in a fresh process whose oneDNN is capped to AVX2: no VNNI there on any x86 CPU, so its int8
# GEMM sums pairs in int16; the probe must find the bounded pairs, and they must be exact at BERT's shapes.
_AVX2_PAIRS_SCRIPT = """
import json, torch
from bertlite.quant import int8 as q
grid = q.int8_grid("onednn")
exact = []
g = torch.Generator().manual_seed(0)
for k, n in ((384, 1536), (1536, 384)):
    linear = torch.nn.Linear(k, n)
    with torch.no_grad():
        linear.weight.normal_(generator=g)
        linear.weight[:, 10:12] *= 6  # outlier columns, as SmoothQuant makes: the widest pairs
    layer = q.Int8Linear.from_linear(linear, kernel="onednn", asymmetric=True)
    weight = q.quantize_per_channel(linear.weight.detach(), grid.weight_limit, grid.pair_limit)[0]
    x = torch.randint(0, 256, (333, k), dtype=torch.uint8, generator=g)
    x[0] = 255
    expected = ((x.long() - layer.zero_point) @ weight.long().T).double() * layer.weight_scale.double()
    exact.append(bool(torch.allclose(layer.gemm(x).double(), expected, rtol=1e-6, atol=1e-6)))
print(json.dumps({"grid": grid._asdict(), "exact": exact}))
"""


@pytest.mark.slow
def test_onednn_capped_to_avx2_gets_bounded_pairs_exact_at_bert_shapes() -> None:
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        pytest.skip("ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN's x86 kernels only")
    result = run_fresh_without_isa_caps(["-c", _AVX2_PAIRS_SCRIPT], ONEDNN_MAX_CPU_ISA="AVX2")
    report = json.loads(result.stdout)
    assert report["grid"] == {"activation_max": 255, "weight_limit": 127, "pair_limit": 128}
    assert report["exact"] == [True, True]


def _odd_pairs_saturating_gemm(
    x: torch.Tensor, zero_point: int, weight: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """_saturating_gemm with pairs (k, k + 1) for odd k: weights bounded on even pairs can still saturate."""
    inner = _saturating_gemm(x[:, 1:-1], 0, weight[:, 1:-1], torch.ones(len(weight)))
    ends = (x[:, None, [0, -1]].to(torch.int32) * weight[None, :, [0, -1]].to(torch.int32)).sum(-1)
    return (inner + ends - zero_point * weight.to(torch.float32).sum(1)) * scale


def test_a_kernel_that_pairs_other_weights_gets_7_bit_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kernels._GEMMS, "int_mm", _odd_pairs_saturating_gemm)
    monkeypatch.setattr(kernels, "_grids", {})
    assert quantization.int8_grid("int_mm") == quantization.Int8Grid(127, 127)
    linear, x, expected = _linear_and_reference()
    for asymmetric in (False, True):
        q = Int8Linear.from_linear(linear, kernel="int_mm", asymmetric=asymmetric)
        qx = q.quantize_input(x)[0]
        assert int(qx.max()) <= 127 and int(q.weight.to(torch.int16).abs().max()) == 127
        assert relative_error(q(x), expected) < 0.03  # exact products, 7-bit activations
    # the same kernel, were it to saturate with 7-bit activations too: 7-bit weights instead
    monkeypatch.setattr(kernels, "_grids", {})
    monkeypatch.setattr(kernels, "INT8_GRIDS", (kernels.FULL_GRID, quantization.Int8Grid(255, 63)))
    assert quantization.int8_grid("int_mm") == quantization.Int8Grid(255, 63)
    with pytest.raises(ValueError, match=r"exact here for int8 weights in \[-63, 63\]; got torch.int8 up to 127"):
        Int8Linear(torch.full((4, 64), 127, dtype=torch.int8), torch.ones(4), None, kernel="int_mm")


@pytest.mark.parametrize("grid", quantization.INT8_GRIDS, ids=str)
def test_quantize_int8_quantizes_the_same_inputs_asymmetric_on_every_grid_and_warns_on_7_bits(
    monkeypatch: pytest.MonkeyPatch, grid: quantization.Int8Grid
) -> None:
    monkeypatch.setattr(kernels, "_grids", {"dequantize": grid})
    model = to_bertlite(make_hf_model()).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_int8(model, kernel="dequantize")
    notes = [str(w.message) for w in caught if issubclass(w.category, quantization.Int8PrecisionWarning)]
    assert len(notes) == grid.reduced and all("7-bit activations" in note for note in notes)
    layers = {name: m for name, m in model.named_modules() if isinstance(m, Int8Linear)}
    assert layers and all(m.grid == grid for m in layers.values())
    # one-sided inputs (GELU's output; LayerNorm's on [CLS] / [SEP]) asymmetric, the attention's context not
    assert {name for name, m in layers.items() if not m.asymmetric} == {
        f"encoder.layer.{i}.attention.output.dense" for i in range(model.config.num_hidden_layers)
    }
    inputs = random_batch(model.config, batch=2, seq=7)
    reference = to_bertlite(make_hf_model()).eval()
    with torch.no_grad():
        got, expected = model(**inputs).last_hidden_state, reference(**inputs).last_hidden_state
    assert F.cosine_similarity(got, expected, dim=-1).min() > 0.99


# --- the model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def int8_embedder(real_model_path: Path) -> Embedder:
    return Embedder.from_pretrained(real_model_path, dtype="int8")


def test_quantize_int8_replaces_every_encoder_linear_and_keeps_no_fp32_copy(int8_embedder: Embedder) -> None:
    encoder = int8_embedder.model.encoder
    assert not any(isinstance(m, nn.Linear) for m in encoder.modules())
    assert all(isinstance(layer.attention.self.qkv, Int8Linear) for layer in encoder.layer)
    assert all(isinstance(layer.attention.self.query, FusedIntoQKV) for layer in encoder.layer)
    assert not any(p.is_floating_point() and p.dim() == 2 for p in encoder.parameters())  # only LayerNorms
    assert int8_embedder.unpad  # packed batches: the layers call Int8Linear on (N, H) rows


# Texts of 2-3 tokens ("" is [CLS] [SEP]): mostly the tokens whose massive activations set the int8 range.
TINY_TEXTS = ["", "\x00", "\u200b", "\ufeff", " ", "\t", ".", "?", "a", "hi", "[SEP]", "[CLS]"]


class Bars(NamedTuple):
    """The documented bars (docs/int8.md): min / mean cosine to float32, on the corpus and on TINY_TEXTS."""

    corpus_min: float
    corpus_mean: float
    tiny_min: float
    tiny_mean: float


EIGHT_BIT_BARS = Bars(0.995, 0.999, 0.995, 0.998)
SEVEN_BIT_BARS = Bars(0.995, 0.998, 0.993, 0.995)  # a 7-bit grid warns (Int8PrecisionWarning)


def bars_of(grid: quantization.Int8Grid) -> Bars:
    return SEVEN_BIT_BARS if grid.reduced else EIGHT_BIT_BARS


@pytest.fixture(scope="module")
def texts(corpus_texts: list[str]) -> list[str]:
    return corpus_texts[:500] + TINY_TEXTS


@pytest.fixture(scope="module")
def fp32_vectors(real_model_path: Path, texts: list[str]) -> np.ndarray:
    return Embedder.from_pretrained(real_model_path, dtype="float32").encode(texts)


def assert_meets_bars(vectors: np.ndarray, fp32_vectors: np.ndarray, bars: Bars) -> None:
    cosine = (vectors * fp32_vectors).sum(axis=1)  # both normalized
    corpus, tiny = cosine[: -len(TINY_TEXTS)], cosine[-len(TINY_TEXTS) :]
    assert float(corpus.min()) >= bars.corpus_min and float(corpus.mean()) >= bars.corpus_mean, (
        f"corpus min / mean {corpus.min():.5f} / {corpus.mean():.5f}"
    )
    assert float(tiny.min()) >= bars.tiny_min and float(tiny.mean()) >= bars.tiny_mean, dict(
        zip(TINY_TEXTS, tiny.round(5).tolist(), strict=True)
    )


@pytest.mark.slow
@pytest.mark.parametrize("grid", quantization.INT8_GRIDS, ids=str)
def test_every_grid_meets_its_bars_through_the_exact_reference(
    grid: quantization.Int8Grid,
    monkeypatch: pytest.MonkeyPatch,
    real_model_path: Path,
    texts: list[str],
    fp32_vectors: np.ndarray,
) -> None:
    # The "dequantize" kernel multiplies any grid's integers exactly (up to float32 rounding) on any CPU,
    # so every grid a CPU can get is held to its bars here, whatever CPU runs the suite.
    monkeypatch.setitem(kernels._grids, "dequantize", grid)
    embedder = Embedder.from_pretrained(real_model_path, dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", quantization.Int8PrecisionWarning)  # 7-bit grids: tested above
        quantize_int8(embedder.model, embedder.tokenizer, kernel="dequantize")
    assert {m.grid for m in embedder.model.modules() if isinstance(m, Int8Linear)} == {grid}
    vectors = embedder.encode(texts, max_tokens=8192)
    assert_meets_bars(vectors, fp32_vectors, bars_of(grid))
    kept = [m.outlier_channels for m in embedder.model.modules() if isinstance(m, Int8Linear)]
    assert 0 < sum(len(c) for c in kept if c is not None) <= 12  # a few float32 channels, not a float32 layer


@pytest.mark.slow
def test_the_kernel_auto_picks_gives_its_grids_reference_vectors(
    int8_embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
    real_model_path: Path,
    texts: list[str],
    fp32_vectors: np.ndarray,
) -> None:
    # What users get: the fastest kernel here (packed batches), on its grid, held to the bars the test above
    # holds that grid to on every CPU. It multiplies the same integers as the reference, but float32 sums
    # them in another order, and a value that lands on the other side of a rounding step in one layer
    # quantizes differently in the next: the two are different draws of the same rounding error (the
    # reference's own float32 and float64 sums measured min cosine 0.9991 to each other, on "."), so each
    # text's error must match the reference's, not its vector.
    grids = {m.grid for m in int8_embedder.model.modules() if isinstance(m, Int8Linear)}
    assert len(grids) == 1
    grid = grids.pop()
    monkeypatch.setitem(kernels._grids, "dequantize", grid)
    reference = Embedder.from_pretrained(real_model_path, dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", quantization.Int8PrecisionWarning)
        quantize_int8(reference.model, reference.tokenizer, kernel="dequantize")
    vectors = int8_embedder.encode(texts, max_tokens=8192)
    expected = reference.encode(texts, max_tokens=8192)
    assert float((vectors * expected).sum(axis=1).min()) > 0.998  # wrong integers (a saturated sum) fall far below
    got, reference_cosine = (vectors * fp32_vectors).sum(axis=1), (expected * fp32_vectors).sum(axis=1)
    assert abs(float(got.mean() - reference_cosine.mean())) < 2e-4
    assert_meets_bars(vectors, fp32_vectors, bars_of(grid))


@pytest.mark.slow
def test_the_fallback_kernel_on_padded_batches_meets_the_bars(
    real_model_path: Path, texts: list[str], fp32_vectors: np.ndarray
) -> None:
    embedder = Embedder.from_pretrained(real_model_path, dtype="float32", unpad=False)
    quantize_int8(embedder.model, embedder.tokenizer, kernel="dequantize")  # this CPU's own grid for it
    grid = quantization.int8_grid("dequantize")
    assert_meets_bars(embedder.encode(texts), fp32_vectors, bars_of(grid))


@pytest.mark.slow
def test_cli_dtype_int8_gives_the_api_vectors(
    int8_embedder: Embedder,
    real_model_path: Path,
    corpus_texts: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    texts = [t for t in corpus_texts if "\n" not in t][:6]
    expected = int8_embedder.encode(texts)
    source, out = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    code = main(["embed", str(real_model_path), "-i", str(source), "-o", str(out), "--dtype", "int8", "--quiet"])
    assert code == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-6)
    assert int8_embedder.precision == "int8"  # what `bertlite embed`'s summary line names


def test_calibration_texts_are_many_and_short(real_model_path: Path) -> None:
    lengths = [len(e.ids) for e in load_tokenizer(real_model_path).encode_batch(CALIBRATION_TEXTS)]
    assert len(lengths) >= 64 and max(lengths) <= 32


def test_save_pretrained_of_a_quantized_model_is_refused(tmp_path: Path) -> None:
    model = to_bertlite(make_hf_model(attn="sdpa"), attn="sdpa")
    quantize_int8(model, kernel="dequantize")
    with pytest.raises(ValueError, match="int8-quantized, which bertlite does not save"):
        model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_quantized_tiny_model_runs_padded_batches() -> None:
    model = to_bertlite(make_hf_model(attn="sdpa"), attn="sdpa")
    ids = torch.randint(1, 99, (3, 11))
    mask = (torch.arange(11)[None] < torch.tensor([[11], [7], [3]])).long()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        quantize_int8(model, alpha=None, kernel="dequantize")
        got = model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    cosine = F.cosine_similarity(got[real], expected[real], dim=-1)
    assert float(cosine.min()) > 0.99


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kernel": "int4"}, r"kernel='int4' is not one of auto, onednn, int_mm, dequantize"),
        ({"alpha": 1.5}, r"alpha=1.5 must be between 0 and 1"),
        ({"keep_fp32": ["encoder.layer.9.output.dense"]}, r"keep_fp32: 'encoder.layer.9.output.dense' not among"),
        ({"asymmetric": "output.dense"}, r"asymmetric takes a list of Linear names"),
    ],
)
def test_bad_quantize_arguments_are_named(kwargs: dict, message: str) -> None:
    model = to_bertlite(make_hf_model(attn="sdpa"), attn="sdpa")
    with pytest.raises((ValueError, TypeError), match=message):
        quantize_int8(model, **kwargs)
    assert not any(isinstance(m, Int8Linear) for m in model.modules())  # nothing half-done


def test_quantizing_twice_or_a_bf16_model_is_refused() -> None:
    model = to_bertlite(make_hf_model(attn="sdpa"), attn="sdpa")
    quantize_int8(model, kernel="dequantize")
    with pytest.raises(ValueError, match="already quantized"):
        quantize_int8(model)
    with pytest.raises(ValueError, match="needs a float32 model on the CPU, got torch.bfloat16"):
        quantize_int8(to_bertlite(make_hf_model(attn="sdpa"), attn="sdpa").to(torch.bfloat16))


def test_no_tokens_give_an_empty_output() -> None:
    q = Int8Linear.from_linear(nn.Linear(16, 8), kernel="dequantize", asymmetric=True)
    assert q(torch.randn(2, 0, 16)).shape == (2, 0, 8)


@pytest.mark.parametrize("move", [lambda m: m.half(), lambda m: m.to("meta"), lambda m: m.encoder.double()])
def test_moving_a_quantized_model_is_refused_and_moves_nothing(move) -> None:
    torch.manual_seed(0)
    model = to_bertlite(make_hf_model()).eval()
    quantize_int8(model, kernel="dequantize")
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    expected = model(input_ids=ids).last_hidden_state
    with pytest.raises(ValueError, match="int8-quantized model runs on the CPU with float32 activations"):
        move(model)
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cpu", torch.float32)}
    torch.testing.assert_close(model(input_ids=ids).last_hidden_state, expected, rtol=0, atol=0)
