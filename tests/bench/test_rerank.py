"""python -m bench rerank: how it compares two libraries' scores and counts the arithmetic each runs."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bench.flops import encoder_gflop
from bench.rerank import agreement, format_rerank, rerank_work

# hidden 2, intermediate 4, two layers: small enough to count by hand.
TINY = SimpleNamespace(hidden_size=2, intermediate_size=4, num_hidden_layers=2)


def test_encoder_gflop_counts_gemms_and_attention_per_layer():
    # One sequence of 3 rows, per layer: GEMMs 2*3*(4*2*2 + 2*2*4) = 192, attention 4*3*3*2 = 72.
    assert encoder_gflop(TINY, [3]) == pytest.approx(2 * 264 / 1e9)
    assert encoder_gflop(TINY, [3, 1]) == pytest.approx(2 * (264 + (2 * 32 + 4 * 2)) / 1e9)


def test_encoder_gflop_with_the_last_layer_on_the_first_row_only():
    # Last layer: query|key|value for 3 rows 2*3*3*2*2 = 72, one query over 3 keys 4*3*2 = 24,
    # output dense and FFN for one row 2*(2*2 + 2*2*4) = 40.
    assert encoder_gflop(TINY, [3], first_token_last_layer=True) == pytest.approx((264 + 136) / 1e9)


def test_agreement_compares_scores_and_rankings_query_by_query():
    expected = np.array([3.0, 2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 4.0])
    got = np.array([3.0, 2.0, 0.0, 1.0, 1.0, 2.0, 3.0, 4.5])  # query 0: the last two swap
    result = agreement(expected, got, per_query=4)
    assert result == {
        "max_abs_diff_scores": 1.0,
        "queries": 2,
        "queries_same_order": 1,
        "queries_same_top1": 2,
        "mean_kendall_tau": pytest.approx((4 / 6 + 1) / 2),  # 5 of 6 pairs agree in query 0, all in query 1
    }


def test_agreement_of_reversed_rankings():
    result = agreement(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]), per_query=3)
    assert (result["queries_same_order"], result["queries_same_top1"], result["mean_kendall_tau"]) == (0, 0, -1.0)


class FakeCrossEncoder:
    """predict() tokenizes in batches through self.preprocess, as sentence-transformers' CrossEncoder does."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def preprocess(self, batch: list) -> dict:
        width = max(self.lengths[i] for i, _ in batch)
        mask = torch.tensor([[1] * self.lengths[i] + [0] * (width - self.lengths[i]) for i, _ in batch])
        return {"attention_mask": mask}

    def predict(self, pairs: list, batch_size: int) -> None:
        for start in range(0, len(pairs), batch_size):
            self.preprocess(pairs[start : start + batch_size])


def test_rerank_work_reads_the_padded_batches_and_restores_preprocess():
    st = FakeCrossEncoder([3, 1, 2])
    pairs = [(i, "passage") for i in range(3)]
    work = rerank_work(st, TINY, pairs, batch_size=2)
    assert work["real_tokens"] == 6
    assert work["sentence_transformers_padded_tokens"] == 3 + 3 + 2  # batches [3, 1] -> width 3, [2]
    assert work["sentence_transformers_gflop"] == pytest.approx(encoder_gflop(TINY, [3, 3, 2]))
    assert work["bertlite_gflop"] == pytest.approx(encoder_gflop(TINY, [3, 1, 2], first_token_last_layer=True))
    assert work["work_ratio"] == pytest.approx(work["sentence_transformers_gflop"] / work["bertlite_gflop"])
    assert "preprocess" not in vars(st)


def test_the_report_names_each_library_and_the_work():
    row = {"seconds": [2.0], "median_s": 2.0, "pairs_per_s": 500.0, "gflops": 100.0}
    compared = {
        "per_round_x_sentence_transformers": 1.5,
        "max_abs_diff_scores": 6e-8,
        "queries": 50,
        "queries_same_order": 50,
        "queries_same_top1": 50,
        "mean_kendall_tau": 1.0,
    }
    result = {
        "pairs": 1000,
        "per_query": 20,
        "rounds": 1,
        "threads": 2,
        "max_length": 512,
        "libraries": {"sentence_transformers": row, "bertlite": {**row, "pairs_per_s": 750.0, **compared}},
        "work": {
            "sentence_transformers_gflop": 1066.7,
            "bertlite_gflop": 749.8,
            "work_ratio": 1.4227,
            "real_tokens": 39400,
            "sentence_transformers_padded_tokens": 49000,
        },
    }
    lines = format_rerank(result).splitlines()
    assert lines[2].split() == ["sentence_transformers", "500.0", "1", "100.0"]
    assert lines[3].split() == ["bertlite", "750.0", "1.50", "100.0", "6.00e-08", "50/50", "50/50", "1.000"]
    assert lines[4] == (
        "work: sentence-transformers 1067 GFLOP (pads 39400 tokens to 49000), bertlite 750 GFLOP: "
        "1.42x less at equal GEMM speed"
    )
