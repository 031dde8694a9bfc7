"""M3Encoder (BGE-M3) against FlagEmbedding's BGEM3FlagModel on a tiny random XLM-RoBERTa with the two heads
saved as FlagEmbedding saves them, in the same run: dense vectors, lexical weights, ColBERT vectors and the
scores, from one forward per batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite import CheckpointError
from bertlite.jobs.m3 import M3Encoder
from tests.helpers import save_m3_heads
from tests.models.test_roberta import TINY_ROBERTA, unigram_tokenizer

TEXTS = [
    "the list of items",
    "sort a dict by value",
    "json writes a new sequence of items",
    "zebra",
    "a " * 40,
    "the the the key key value",
]
TOL = 1e-5  # unit vectors' entries and small weights: float32 noise of two forwards
# Lexical weights and scores are sums of products that reach tens (31.5 on TEXTS): float32 keeps about 7 digits
# there, so they are held to a few ulps of their size besides TOL (4.8e-7 of 31.5 seen on a Xeon with AMX).
RTOL = 1e-6


@pytest.fixture(scope="module")
def m3_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_m3_folder(tmp_path_factory.mktemp("m3") / "bge-m3")


def write_m3_folder(folder: Path) -> Path:
    """A tiny random XLM-RoBERTa, its unigram tokenizer, colbert_linear.pt (32 -> 32) and sparse_linear.pt,
    saved as FlagEmbedding saves them."""
    torch.manual_seed(0)
    model = transformers.XLMRobertaModel(transformers.XLMRobertaConfig(**TINY_ROBERTA), add_pooling_layer=False)
    with torch.no_grad():
        for name, p in model.named_parameters():  # LayerNorms around 1, so token rows differ
            p.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.2)
    model.save_pretrained(folder)
    unigram_tokenizer(folder)
    save_m3_heads(folder, hidden=32, colbert_dim=32)
    return folder


@pytest.fixture(scope="module")
def theirs(m3_folder: Path):
    from FlagEmbedding import BGEM3FlagModel

    model = BGEM3FlagModel(str(m3_folder), use_fp16=False, devices="cpu", passage_max_length=24, batch_size=4)
    return model, model.encode(TEXTS, return_dense=True, return_sparse=True, return_colbert_vecs=True)


def assert_same_outputs(ours: dict, expected: dict) -> None:
    np.testing.assert_allclose(ours["dense_vecs"], expected["dense_vecs"], atol=TOL, rtol=0)
    for mine, their in zip(ours["lexical_weights"], expected["lexical_weights"], strict=True):
        assert set(mine) == set(their)
        for key, weight in their.items():
            assert float(mine[key]) == pytest.approx(float(weight), rel=RTOL, abs=TOL), key
    for mine, their in zip(ours["colbert_vecs"], expected["colbert_vecs"], strict=True):
        assert mine.shape == their.shape
        np.testing.assert_allclose(mine, their, atol=TOL, rtol=0)


@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_three_outputs_equal_flag_embedding(m3_folder: Path, theirs, unpad: bool) -> None:
    _, expected = theirs
    ours = M3Encoder.from_pretrained(m3_folder, dtype="float32", unpad=unpad)
    got = ours.encode(TEXTS, max_length=24, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    assert got["dense_vecs"].shape == expected["dense_vecs"].shape and got["dense_vecs"].dtype == np.float32
    assert any(len(w) for w in got["lexical_weights"]) and any(
        len(w) < len(set(e.ids)) for w, e in zip(got["lexical_weights"], ours.tokenize(TEXTS), strict=True)
    ), "the test texts should have kept and dropped tokens"
    assert_same_outputs(got, expected)


def test_one_forward_per_batch_gives_all_three(m3_folder: Path) -> None:
    ours = M3Encoder.from_pretrained(m3_folder, dtype="float32")
    calls = []
    handle = ours.bert.register_forward_hook(lambda *args: calls.append(1))
    try:
        out = ours.encode(TEXTS, batch_size=len(TEXTS), return_dense=True, return_sparse=True, return_colbert_vecs=True)
    finally:
        handle.remove()
    assert len(calls) == 1 and all(out[name] is not None for name in ("dense_vecs", "lexical_weights", "colbert_vecs"))


def test_scores_equal_flag_embedding(m3_folder: Path, theirs) -> None:
    model, expected = theirs
    ours = M3Encoder.from_pretrained(m3_folder, dtype="float32")
    got = ours.encode(TEXTS, max_length=24, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    lexical = ours.compute_lexical_matching_score(got["lexical_weights"][:3], got["lexical_weights"])
    np.testing.assert_allclose(
        lexical,
        model.compute_lexical_matching_score(expected["lexical_weights"][:3], expected["lexical_weights"]),
        atol=TOL,
        rtol=RTOL,
    )
    single = ours.compute_lexical_matching_score(got["lexical_weights"][0], got["lexical_weights"][5])
    their_single = model.compute_lexical_matching_score(expected["lexical_weights"][0], expected["lexical_weights"][5])
    assert float(single) == pytest.approx(float(their_single), rel=RTOL, abs=TOL)
    for q, p in ((0, 2), (1, 4), (3, 5)):
        colbert = ours.colbert_score(got["colbert_vecs"][q], got["colbert_vecs"][p])
        their = model.colbert_score(expected["colbert_vecs"][q], expected["colbert_vecs"][p])
        assert colbert.item() == pytest.approx(their.item(), rel=RTOL, abs=TOL), (q, p)
    dense = got["dense_vecs"][:2] @ got["dense_vecs"].T
    np.testing.assert_allclose(dense, expected["dense_vecs"][:2] @ expected["dense_vecs"].T, atol=TOL, rtol=RTOL)


def test_single_text_and_one_output(m3_folder: Path, theirs) -> None:
    model, _ = theirs
    ours = M3Encoder.from_pretrained(m3_folder, dtype="float32", max_length=24)
    got = ours.encode(TEXTS[1], return_sparse=True, return_dense=False)
    expected = model.encode(TEXTS[1], return_sparse=True, return_dense=False)
    assert got["dense_vecs"] is None and got["colbert_vecs"] is None
    assert set(got["lexical_weights"]) == set(expected["lexical_weights"])
    tokens = ours.convert_id_to_token(got["lexical_weights"])
    assert tokens.keys() == model.convert_id_to_token(expected["lexical_weights"]).keys()
    bad_keys = (({"abc": 0.5}, "key 'abc' is not a token id"), ({10**6: 0.5}, "token id 1000000 is not below"))
    for bad, message in bad_keys:
        with pytest.raises(ValueError, match=rf"lexical_weights\[1\]: {message}"):
            ours.convert_id_to_token([got["lexical_weights"], bad])
    with pytest.raises(ValueError, match="choose one output at least"):
        ours.encode(TEXTS, return_dense=False)


def test_int8_and_auto_stay_close_to_float32(m3_folder: Path) -> None:
    full = M3Encoder.from_pretrained(m3_folder, dtype="float32").encode(TEXTS, return_colbert_vecs=True)
    for dtype in ("int8", "auto"):
        low = M3Encoder.from_pretrained(m3_folder, dtype=dtype).encode(TEXTS, return_colbert_vecs=True)
        assert (low["dense_vecs"] * full["dense_vecs"]).sum(axis=1).min() >= 0.99
        cosines = [(a * b).sum(axis=1).min() for a, b in zip(low["colbert_vecs"], full["colbert_vecs"], strict=True)]
        assert min(cosines) >= 0.99


def test_a_folder_without_heads_is_refused_by_name(m3_folder: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "plain"
    shutil.copytree(m3_folder, folder)
    (folder / "sparse_linear.pt").unlink()
    with pytest.raises(CheckpointError, match=r"no sparse_linear\.pt, so it is not a BGE-M3 folder"):
        M3Encoder.from_pretrained(folder, dtype="float32")
    torch.save({"weight": torch.full((1, 32), float("nan")), "bias": torch.zeros(1)}, folder / "sparse_linear.pt")
    with pytest.raises(CheckpointError, match=r"sparse_linear\.pt: holds NaN or Inf"):
        M3Encoder.from_pretrained(folder, dtype="float32")
    torch.save({"w": torch.zeros(1, 32)}, folder / "sparse_linear.pt")
    with pytest.raises(CheckpointError, match=r"expected a Linear's weight and bias, got keys \['w'\]"):
        M3Encoder.from_pretrained(folder, dtype="float32")


@pytest.mark.parametrize("head", ["sparse_linear.pt", "colbert_linear.pt"])
def test_a_head_without_its_bias_is_refused(m3_folder: Path, tmp_path: Path, head: str) -> None:
    """FlagEmbedding's heads are Linears with a bias and it refuses a file without one; so does bertlite, rather
    than run the head as if the bias were 0."""
    import shutil

    folder = tmp_path / "no-bias"
    shutil.copytree(m3_folder, folder)
    state = torch.load(folder / head, weights_only=True)
    torch.save({"weight": state["weight"]}, folder / head)
    with pytest.raises(CheckpointError, match=rf"{head}: no bias beside the weight: BGE-M3's heads have one"):
        M3Encoder.from_pretrained(folder, dtype="float32")


def test_m3_encoder_is_public() -> None:
    assert bertlite.M3Encoder is M3Encoder


@pytest.mark.parametrize(
    "options",
    [{}, {"weights_for_different_modes": [0.4, 0.2, 0.4], "max_passage_length": 8, "batch_size": 4}],
)
def test_compute_score_equals_flag_embedding(m3_folder: Path, theirs, options: dict) -> None:
    """Every pair of TEXTS, in FlagEmbedding's five modes, against BGEM3FlagModel.compute_score in this run."""
    model, _ = theirs
    ours = M3Encoder.from_pretrained(m3_folder, dtype="float32")
    pairs = [(q, p) for q in TEXTS for p in TEXTS]
    options = {"max_query_length": 24, "max_passage_length": 24, **options}
    got, expected = ours.compute_score(pairs, **options), model.compute_score(pairs, **options)
    assert (
        sorted(got)
        == sorted(expected)
        == sorted(["colbert", "sparse", "dense", "sparse+dense", "colbert+sparse+dense"])
    )
    for mode, scores in expected.items():
        np.testing.assert_allclose(got[mode], scores, rtol=1e-5, atol=1e-6, err_msg=mode)
    one, their_one = ours.compute_score(pairs[1], **options), model.compute_score(pairs[1], **options)
    assert {mode: type(score) for mode, score in one.items()} == dict.fromkeys(their_one, float)
    np.testing.assert_allclose(list(one.values()), list(their_one.values()), rtol=1e-5, atol=1e-6)
    assert ours.compute_score([]) == model.compute_score([]) == []
    with pytest.raises(ValueError, match="weights_for_different_modes must be 3 weights"):
        ours.compute_score(pairs, weights_for_different_modes=[1.0, 1.0])
