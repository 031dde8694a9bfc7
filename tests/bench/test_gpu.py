"""python -m bench gpu: the device script runs on the CPU, times every config and checks parity against transformers."""

from __future__ import annotations

import json

import pytest

from bench.__main__ import main
from bench.gpu import TARGETS

pytestmark = pytest.mark.slow  # a benchmark: four engines load the real checkpoint and embed corpus texts


def test_bench_gpu_on_the_cpu_times_every_config_and_checks_parity(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    main(["gpu", "--device", "cpu", "--texts", "40", "--seconds", "0.2", "--rounds", "1", "--json", str(out)])
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["failures"] == [], result["failures"]
    assert result["throughput"]["device_name"] == result["cpu"]
    assert {"torch", "transformers", "sentence-transformers"} <= set(result["versions"])
    assert result["commit"]

    configs = result["throughput"]["configs"]
    assert list(configs) == ["bertlite_auto", "transformers_sdpa_sorted", "sentence_transformers", "bertlite_fp32"]
    for name, r in configs.items():
        assert r["texts_per_s"] > 0, name
        assert r["useful_tflops"] > 0, name
        assert r["pct_of_peak"] is None, name  # no GPU peak on a CPU
    assert set(result["throughput"]["ratios"]) == set(TARGETS)

    parity = result["parity"]
    model = parity["model"]
    assert model["texts"] == 40
    assert model["max_abs_diff_last_hidden_state"] < 1e-4  # bertlite fp32 eager vs transformers, in this run
    assert model["max_abs_diff_pooler_output"] < 1e-4
    embedder = parity["embedder"]
    assert set(embedder["dtypes"]) == {"float32", "auto"}  # half precisions only on CUDA
    assert embedder["dtypes"]["float32"]["min_cosine_vs_float32"] == pytest.approx(1.0)
    assert embedder["dtypes"]["auto"]["min_cosine_vs_float32"] >= 0.9999
    assert embedder["min_cosine_st_fp32_vs_bertlite_fp32"] > 0.99999
    assert parity["bars"] == {"fp32_max_abs_diff": True, "auto_min_cosine": True}

    report = capsys.readouterr().out
    assert "FAILED" not in report
    assert "bar: fp32 max |diff| < 0.0001: PASS; auto min cosine >= 0.9999 to float32: PASS" in report
