"""python -m bench throughput --jobs: each job in float32, auto and int8 with its bar, on a tiny model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from bench.modes import JOBS, bench_modes, format_modes, sparse_rows
from tests.helpers import make_hf_model


def tiny_bert_folder(real_model_path: Path, folder: Path) -> Path:
    """A tiny random BertModel (hidden 32) with the real tokenizer: the base every job's model is built from."""
    bert = make_hf_model(vocab_size=30522, max_position_embeddings=512, add_pooling_layer=False)
    with torch.no_grad():
        for name, p in bert.named_parameters():  # LayerNorms around 1, so token rows differ
            p.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.2)
    bert.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(real_model_path).save_pretrained(folder)
    return folder


def test_sparse_rows_split_a_coo_tensor_by_row_with_empty_rows_kept():
    dense = torch.tensor([[0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])
    rows = sparse_rows(dense.to_sparse())
    assert [r[0].tolist() for r in rows] == [[1, 3], [], [0]]
    assert [r[1].tolist() for r in rows] == [[2.0, 1.0], [], [3.0]]


def test_every_job_records_each_mode_s_precision_ratio_and_bar(
    real_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
):
    from bertlite.layers import native_attention
    from bertlite.quant import int8

    # the compiled kernels a long job builds first: no part of the record, and a compile can take a minute
    monkeypatch.setattr(native_attention, "build", lambda: None)
    monkeypatch.setattr(int8, "build_compiled_quantization", lambda: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's ops are too small to share; on a busy machine threads only wait
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    folder = tiny_bert_folder(real_model_path, tmp_path / "bert")
    counts = {"embed": 8, "rerank": 6, "sparse": 5, "multi-vector": 4}
    result = bench_modes(str(folder), list(JOBS), counts, rounds=2, pause_s=0, scratch=tmp_path / "built")
    assert list(result["jobs"]) == list(JOBS)
    for name, job in result["jobs"].items():
        assert job["inputs"] == counts[name]
        configs = job["configs"]
        assert list(configs) == ["float32", "auto", "int8"]
        assert configs["float32"]["precision"] == "float32" and configs["float32"]["bar"] is None
        assert configs["float32"]["per_round_x_float32"] == pytest.approx(1.0)
        assert configs["int8"]["precision"] == "int8"
        assert configs["auto"]["precision"] in ("float32", "bfloat16")
        assert configs["auto"]["precision_reason"].startswith(configs["auto"]["precision"] + ": dtype='auto'")
        for mode in ("auto", "int8"):
            r = configs[mode]
            assert len(r["seconds"]) == 2 and r["texts_per_s"] == pytest.approx(counts[name] / np.median(r["seconds"]))
            assert r["per_round_x_float32"] == pytest.approx(
                np.median([a / b for a, b in zip(configs["float32"]["seconds"], r["seconds"], strict=True)])
            )
            bar = r["bar"]
            assert bar["mode"] == ("int8" if mode == "int8" else "bfloat16")
            assert isinstance(bar["passed"], bool) and "(bar " in bar["summary"]
    summaries = {name: job["configs"]["int8"]["bar"]["summary"] for name, job in result["jobs"].items()}
    assert summaries["embed"].startswith("min cosine to float32")
    assert summaries["rerank"].startswith("max score difference")
    assert summaries["sparse"].startswith("max weight difference")
    assert summaries["multi-vector"].startswith("max MaxSim relative difference")
    table = format_modes(result)
    assert all(f"{name:<14}{mode:<9}" in table for name in JOBS for mode in ("float32", "auto", "int8"))
