"""bench.profile: the time split it reads from the profiler, and int8's ceiling on its GEMMs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import profile

pytestmark = pytest.mark.slow  # benchmarks: the profiler on real forwards


def event(key: str, self_us: float) -> SimpleNamespace:
    return SimpleNamespace(key=key, self_cpu_time_total=self_us)


def test_time_split_sums_every_op_and_the_gemm_ops():
    events = [
        event("onednn::qlinear_pointwise", 2_500_000),
        event("mkldnn::_linear_pointwise", 500_000),
        event("aten::_scaled_dot_product_flash_attention_for_cpu", 700_000),
        event("aten::gelu", 300_000),
    ]
    assert profile.time_split(events, 4.25) == {"wall_s": 4.25, "total_s": 4.0, "gemm_s": 3.0}


def test_int8_ceiling_is_int8_gemms_plus_fp32_time_outside_its_gemms():
    fp32 = {"total_s": 10.0, "gemm_s": 9.0}
    int8 = {"total_s": 8.0, "gemm_s": 4.5}
    ceiling = profile.int8_ceiling(fp32, int8)
    assert ceiling["int8_ceiling_x_fp32"] == pytest.approx(10.0 / 5.5)  # 4.5 s of GEMMs + fp32's other 1 s
    assert ceiling["int8_gemm_speedup"] == pytest.approx(2.0)
    assert ceiling["fp32_gemm_share"] == pytest.approx(0.9)
    assert ceiling["int8_gemm_share"] == pytest.approx(4.5 / 8.0)
    assert ceiling["int8_x_fp32_profiled"] == pytest.approx(1.25)
    # int8 spends 3.5 s outside its GEMMs, float32 1 s outside its own: 2.5 s of int8's 8 s are its overhead
    assert ceiling["int8_overhead_share"] == pytest.approx(2.5 / 8.0)
    assert ceiling["int8_x_ceiling"] == pytest.approx(1.25 / (10.0 / 5.5))
    text = profile.format_ceiling(ceiling)
    assert "1.82x float32" in text and "int8 runs at 0.69 of it" in text and "31% of int8's time" in text


@pytest.mark.parametrize("dtype", [None, "int8"])
def test_profile_finds_the_gemms_of_each_path(real_model_path, corpus_texts, dtype):
    table, split = profile.profile_bertlite(str(real_model_path), corpus_texts[:16], dtype)
    assert table.startswith(f"Profile: bertlite {dtype or 'float32'}, 16 texts in ")
    # the real ops' names: a renamed op would leave the ceiling without GEMMs
    assert 0 < split["gemm_s"] < split["total_s"] < split["wall_s"]
