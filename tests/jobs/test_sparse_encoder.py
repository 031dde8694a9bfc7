"""SparseEncoder (SPLADE): the vectors, decode, similarity and errors of sentence-transformers' SparseEncoder,
on tiny random masked-LM models saved by sentence-transformers in the test, with the real tokenizer."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from sentence_transformers import SparseEncoder as STSparseEncoder

from bertlite import CheckpointError, SparseEncoder
from tests.helpers import masked_lm_folder, splade_folder
from tests.serve_helpers import one_torch_thread  # noqa: F401 (an autouse fixture)

VOCAB = 30522  # the real tokenizer's; the rest of the model is tiny
MAX_LENGTH = 24
TOL = 1e-5
TEXTS = [
    "The weather is lovely today.",
    "",
    "a",
    "Python's asyncio runs coroutines on an event loop; " * 6,  # longer than MAX_LENGTH
    "naïve café, Größe, 日本語のテキスト, emoji 🙂 and ∑ math",
    "It's so sunny outside!",
    "He drove to the stadium.",
]
PROMPTS = {"query": "query: ", "document": "passage: "}


def st_splade(base: Path, folder: Path, pooling: str, **kwargs: object) -> STSparseEncoder:
    """splade_folder's model (max length MAX_LENGTH), loaded back from its folder by sentence-transformers."""
    return STSparseEncoder(
        str(splade_folder(base, folder, pooling=pooling, max_seq_length=MAX_LENGTH, **kwargs)), device="cpu"
    )


@pytest.fixture(scope="module")
def base(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return masked_lm_folder(real_model_path, tmp_path_factory.mktemp("sparse") / "mlm")


@pytest.fixture(scope="module", params=["max", "sum"])
def pair(request: pytest.FixtureRequest, base: Path) -> tuple[Path, STSparseEncoder]:
    folder = base.parent / f"splade-{request.param}"
    return folder, st_splade(base, folder, request.param, legacy_module=request.param == "sum")


@pytest.fixture(scope="module")
def plain(base: Path) -> Path:
    """A plain SPLADE folder (max pooling), for the tests of errors."""
    folder = base.parent / "splade-plain"
    return splade_folder(base, folder, max_seq_length=MAX_LENGTH)


def assert_same_vectors(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape
    ours, theirs = ours.to_dense(), theirs.to_dense()
    assert torch.equal(ours != 0, theirs != 0), "active dimensions differ"
    assert (ours - theirs).abs().max().item() <= TOL


@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_encode_equals_sentence_transformers(unpad: bool, pair: tuple[Path, STSparseEncoder]) -> None:
    folder, st = pair
    expected = st.encode(TEXTS)
    ours = SparseEncoder.from_pretrained(folder, dtype="float32", unpad=unpad).encode(TEXTS)
    assert ours.layout == expected.layout == torch.sparse_coo
    assert_same_vectors(ours, expected)


def test_output_forms_equal_sentence_transformers(pair: tuple[Path, STSparseEncoder]) -> None:
    folder, st = pair
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    dense = ours.encode(TEXTS, batch_size=2, convert_to_sparse_tensor=False)
    assert dense.layout == torch.strided and dense.dtype == torch.float32
    assert_same_vectors(dense, st.encode(TEXTS, convert_to_sparse_tensor=False))
    listed, expected = ours.encode(TEXTS, convert_to_tensor=False), st.encode(TEXTS, convert_to_tensor=False)
    assert len(listed) == len(expected)
    for row, theirs in zip(listed, expected, strict=True):
        assert row.layout == theirs.layout == torch.sparse_coo
        assert_same_vectors(row, theirs)
    single = ours.encode(TEXTS[0])
    assert single.shape == (VOCAB,) and single.is_sparse
    assert_same_vectors(single, st.encode(TEXTS[0]))
    assert ours.encode([]).shape == st.encode([]).shape == (0,)


def test_encode_tokenized_rows(pair: tuple[Path, STSparseEncoder]) -> None:
    folder, st = pair
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    rows = ours.encode_tokenized(ours.encodings(TEXTS), max_tokens=40)
    expected = st.encode(TEXTS, convert_to_sparse_tensor=False)
    assert len(rows) == len(TEXTS)
    for (indices, values), theirs in zip(rows, expected, strict=True):
        assert indices.dtype == np.int64 and values.dtype == np.float32
        assert np.all(np.diff(indices) > 0)
        np.testing.assert_array_equal(indices, theirs.nonzero()[:, 0].numpy())
        np.testing.assert_allclose(values, theirs[indices].numpy(), atol=TOL, rtol=0)


@pytest.mark.slow
def test_max_active_dims_from_folder_and_call(base: Path) -> None:
    folder = base.parent / "splade-top"
    st = st_splade(base, folder, "max", max_active_dims=7)
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    assert ours.max_active_dims == 7
    expected = st.encode(TEXTS)
    assert_same_vectors(ours.encode(TEXTS), expected)
    assert int((expected.to_dense() != 0).sum(1).max()) == 7
    assert_same_vectors(ours.encode(TEXTS, max_active_dims=3), st.encode(TEXTS, max_active_dims=3))
    rows = ours.encode_tokenized(ours.encodings(TEXTS), max_active_dims=3)
    assert all(len(indices) == 3 for indices, _ in rows)


@pytest.mark.slow
def test_query_and_document_prompts(base: Path) -> None:
    folder = base.parent / "splade-prompts"
    st = st_splade(base, folder, "max", prompts=PROMPTS)
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    assert_same_vectors(ours.encode_query(TEXTS), st.encode_query(TEXTS))
    assert_same_vectors(ours.encode_document(TEXTS), st.encode_document(TEXTS))
    assert_same_vectors(ours.encode(TEXTS, prompt="search: "), st.encode(TEXTS, prompt="search: "))
    assert not torch.equal(ours.encode_query(TEXTS[:1]).to_dense(), ours.encode(TEXTS[:1]).to_dense())


@pytest.mark.slow
def test_legacy_folder_settings(base: Path) -> None:
    """Older sentence-transformers folders: max_seq_length in sentence_bert_config.json, word_embedding_dimension."""
    folder = base.parent / "splade-legacy"
    splade_folder(base, folder, pooling="sum", legacy_module=True, max_seq_length=MAX_LENGTH)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 10, "do_lower_case": False}))
    (folder / "1_SpladePooling" / "config.json").write_text(
        json.dumps({"pooling_strategy": "sum", "activation_function": "log1p_relu", "word_embedding_dimension": VOCAB})
    )
    st_config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**st_config, "similarity_fn_name": "cosine"}))
    st = STSparseEncoder(str(folder), device="cpu")
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    assert ours.max_length == 10 and ours.activation_function == "log1p_relu" and ours.similarity_fn_name == "cosine"
    mine, theirs = ours.encode(TEXTS), st.encode(TEXTS)
    assert_same_vectors(mine, theirs)
    torch.testing.assert_close(ours.similarity(mine, mine), st.similarity(theirs, theirs), atol=1e-5, rtol=1e-5)


def test_decode_similarity_sparsity(pair: tuple[Path, STSparseEncoder]) -> None:
    folder, st = pair
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    mine, theirs = ours.encode(TEXTS, max_active_dims=12), st.encode(TEXTS, max_active_dims=12)
    decoded, expected = ours.decode(mine, top_k=5), st.decode(theirs, top_k=5)
    assert [[token for token, _ in row] for row in decoded] == [[token for token, _ in row] for row in expected]
    np.testing.assert_allclose(
        [[w for _, w in row] for row in decoded], [[w for _, w in row] for row in expected], atol=TOL
    )
    assert ours.decode(mine[0]) == ours.decode(mine)[0]
    row = ours.encode_tokenized(ours.encodings(TEXTS[:1]), max_active_dims=12)[0]
    assert [t for t, _ in ours.decode(row)] == [t for t, _ in st.decode(theirs[0])]
    torch.testing.assert_close(ours.similarity(mine, mine), st.similarity(theirs, theirs), atol=1e-4, rtol=1e-6)
    assert ours.sparsity(mine) == st.sparsity(theirs) == ours.sparsity(mine.to_dense())


@pytest.mark.parametrize("name", ["cosine", "euclidean", "manhattan"])
def test_every_similarity_function_of_sentence_transformers(name: str, pair: tuple[Path, STSparseEncoder]) -> None:
    folder, st = pair
    ours = SparseEncoder.from_pretrained(folder, dtype="float32")
    mine, theirs = ours.encode(TEXTS[:4], max_active_dims=30), st.encode(TEXTS[:4], max_active_dims=30)
    first, reverse = torch.tensor([0, 1]), torch.tensor([3, 2, 1, 0])  # sparse tensors take index_select, not slices
    ours.similarity_fn_name, st.similarity_fn_name = name, name
    try:
        expected = st.similarity(theirs, theirs.index_select(0, first))
        if name == "euclidean":
            # sentence-transformers expands |a - b|^2 into norms and dot products for sparse rows, which loses
            # about 3e-3 for these close vectors: the exact distance (float64, dense) is the reference here.
            dense = theirs.to_dense().double()
            expected = -torch.cdist(dense, dense[:2]).float()
        torch.testing.assert_close(ours.similarity(mine, mine.index_select(0, first)), expected, atol=1e-5, rtol=1e-5)
        expected = st.similarity_pairwise(theirs, theirs.index_select(0, reverse))
        got = ours.similarity_pairwise(mine, mine.index_select(0, reverse))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    finally:
        st.similarity_fn_name = None


@pytest.mark.slow
def test_int8_close_to_float32(pair: tuple[Path, STSparseEncoder]) -> None:
    """int8 (the encoder's Linears; the head stays float32): every vector's cosine with the float32 one >= 0.99."""
    folder, st = pair
    ours = SparseEncoder.from_pretrained(folder, dtype="int8")
    assert ours.precision == "int8"
    mine, theirs = ours.encode(TEXTS, convert_to_sparse_tensor=False), st.encode(TEXTS, convert_to_sparse_tensor=False)
    cosine = torch.nn.functional.cosine_similarity(mine, theirs, dim=1)
    assert cosine.min().item() >= 0.99, cosine


def test_embedding_model_refused(real_model_path: Path) -> None:
    message = re.escape(str(real_model_path)) + r" is not a SPLADE checkpoint: .*MLM head.*Embedder"
    with pytest.raises(CheckpointError, match=message):
        SparseEncoder.from_pretrained(real_model_path)


def test_checkpoints_without_mlm_head_refused(base: Path, plain: Path, tmp_path: Path) -> None:
    # A bare BertModel checkpoint: no modules.json, no ...ForMaskedLM architecture.
    bare = tmp_path / "bare"
    transformers.BertModel(transformers.BertConfig.from_pretrained(base)).save_pretrained(bare)
    with pytest.raises(CheckpointError, match=r"bare is not a SPLADE checkpoint: .*MLM head.*Embedder"):
        SparseEncoder.from_pretrained(bare)
    # SPLADE metadata, but the weights of a base model: the head would be random.
    headless = tmp_path / "headless"
    shutil.copytree(plain, headless)
    (headless / "model.safetensors").unlink()
    transformers.BertModel(transformers.BertConfig.from_pretrained(base), add_pooling_layer=False).save_pretrained(
        tmp_path / "weights"
    )
    shutil.copy(tmp_path / "weights" / "model.safetensors", headless / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"headless is not a SPLADE checkpoint: .*cls\.predictions\..*missing"):
        SparseEncoder.from_pretrained(headless)


@pytest.mark.parametrize("module", ["Router", "SparseStaticEmbedding"])
def test_inference_free_folder_refused(module: str, plain: Path, tmp_path: Path) -> None:
    folder = shutil.copytree(plain, tmp_path / "model")
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["type"] = f"sentence_transformers.sparse_encoder.modules.{module}"
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError, match=rf"modules.json has a {module} module"):
        SparseEncoder.from_pretrained(folder)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_max_active_dims(bad: object, plain: Path) -> None:
    folder = plain
    with pytest.raises(ValueError, match="max_active_dims must be a positive integer"):
        SparseEncoder.from_pretrained(folder, max_active_dims=bad)
    encoder = SparseEncoder.from_pretrained(folder)
    with pytest.raises(ValueError, match="max_active_dims must be a positive integer"):
        encoder.encode(TEXTS, max_active_dims=bad)
    with pytest.raises(ValueError, match="max_active_dims must be a positive integer"):
        encoder.encode_tokenized(encoder.encodings(TEXTS), max_active_dims=bad)
