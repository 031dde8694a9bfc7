"""python -m bench table: a result file as the docs' table, every number from the file."""

import pytest

from bench.table import table

RESULT = {
    "cpu": "Some CPU",
    "capabilities": {"cpu_capability": "AVX2"},
    "date": "2026-12-02T10:00:00+00:00",
    "commit": "0123456789abcdef",
    "dirty": False,
    "command": "python -m bench throughput --rounds 5",
    "throughput": {
        "threads": 2,
        "texts": 1000,
        "rounds": 5,
        "configs": {
            "bertlite_fp32": {
                "texts_per_s": 200.04,
                "per_round_x_bertlite_fp32": 1.0,
                "min_cosine_vs_hf_eager_fp32": 0.99999994,
                "mean_cosine_vs_hf_eager_fp32": 1.0,
            },
            "my_engine": {
                "texts_per_s": 100.0,
                "per_round_x_bertlite_fp32": 0.4987,
                "min_cosine_vs_hf_eager_fp32": 0.99,
                "mean_cosine_vs_hf_eager_fp32": 0.995,
            },
        },
    },
}


def test_the_table_has_a_row_per_config_and_says_where_it_comes_from():
    lines = table(RESULT).splitlines()
    assert lines[2] == "| bertlite float32 | 200.0 | 1.00 | 1.00000 / 1.00000 |"
    assert lines[3] == "| my_engine | 100.0 | 0.50 | 0.99000 / 0.99500 |"
    assert lines[-1] == (
        "Some CPU, AVX2, 2 threads; 1000 corpus texts, median of 5 rounds; 2026-12-02, commit 0123456789ab; "
        "`python -m bench throughput --rounds 5`"
    )


def test_a_dirty_tree_is_named():
    assert "commit 0123456789ab (dirty)" in table({**RESULT, "dirty": True})


def test_configs_choose_the_rows_and_an_unknown_one_is_named():
    lines = table(RESULT, ["my_engine"]).splitlines()
    assert lines[2] == "| my_engine | 100.0 | 0.50 | 0.99000 / 0.99500 |" and "| bertlite float32 |" not in "\n".join(
        lines
    )
    with pytest.raises(SystemExit, match="other_engine not in the file; it has bertlite_fp32, my_engine"):
        table(RESULT, ["other_engine"])
