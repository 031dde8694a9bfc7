"""python -m bench m3: how it compares two libraries' three outputs, and a run on a tiny BGE-M3 folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.m3 import bench_m3, differences, format_m3
from tests.jobs.test_m3 import write_m3_folder


def test_differences_name_the_largest_gaps_and_the_texts_with_other_tokens():
    ours = {
        "dense_vecs": np.array([[1.0, 0.0], [0.0, 1.0]]),
        "lexical_weights": [{"5": 0.5, "7": 0.25}, {"9": 1.0}],
        "colbert_vecs": [np.zeros((2, 2)), np.ones((1, 2))],
    }
    theirs = {
        "dense_vecs": np.array([[1.0, 0.0], [0.0, 0.75]]),
        "lexical_weights": [{"5": 0.5, "7": 0.5}, {"9": 1.0, "3": 0.1}],
        "colbert_vecs": [np.zeros((2, 2)), np.full((1, 2), 0.5)],
    }
    assert differences(ours, theirs) == {
        "dense_max_abs_diff": 0.25,
        "lexical_texts_with_other_tokens": 1,
        "lexical_max_abs_diff": 0.25,
        "colbert_max_abs_diff": 0.5,
        "mean_lexical_tokens": 2.0,
    }


@pytest.mark.slow
def test_a_run_on_a_tiny_folder_times_every_config_and_agrees(tmp_path: Path):
    folder = write_m3_folder(tmp_path / "bge-m3")
    texts = ["the list of items", "sort a dict by value", "zebra", "json writes a new sequence"]
    result = bench_m3(folder, texts, rounds=1, pause_s=0)
    assert set(result["configs"]) == {"bertlite_fp32", "bertlite_auto", "flagembedding_fp32"}
    assert result["configs"]["flagembedding_fp32"]["per_round_x_flagembedding"] == pytest.approx(1.0)
    assert result["dense_max_abs_diff"] <= 1e-5 and result["colbert_max_abs_diff"] <= 1e-5
    assert result["lexical_texts_with_other_tokens"] == 0 and result["lexical_max_abs_diff"] <= 1e-5
    assert "flagembedding_fp32" in format_m3(result)
