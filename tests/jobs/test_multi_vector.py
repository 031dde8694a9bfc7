"""MultiVectorEncoder (ColBERT) against sentence-transformers' MultiVectorEncoder on tiny random models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import MultiVectorEncoder as STMultiVectorEncoder

from bertlite import MultiVectorEncoder
from tests.helpers import COLBERT_OPTIONS, colbert_folder

TEXTS = [
    "What is the capital of France?",
    "a",
    "Paris, the capital -- and largest city -- of France; home to the Louvre!",
    "Ünïcödé: naïve café, 東京 and Zürich… «quotes» & emoji 🙂",
    " ".join(f"word{i} with punctuation, again." for i in range(60)),  # past every max length
]

# name -> colbert_folder's options
CONFIGS = {
    "colbert": COLBERT_OPTIONS,
    "attend_min": dict(
        transformer_kwargs={"query_length": 20, "query_expansion": {"strategy": "min", "attend": True, "length": 10}},
        dense_bias=True,
        dense_activation=torch.nn.Tanh(),
        prompts={"query": "query: ", "document": "passage: "},
    ),
    "plain": dict(skiplist=[",", "."]),
}
# Documents that share fewer and fewer words with RANKING_QUERY: float32 MaxSim ranks them in this order.
RANKING_QUERY = "tower bridge river museum"
RANKING_DOCUMENTS = ["tower bridge river museum", "tower bridge river", "tower bridge", "tower", "Bananas are yellow."]


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("colbert")
    return {name: colbert_folder(real_model_path, root / name, **options) for name, options in CONFIGS.items()}


@pytest.fixture(scope="module", params=list(CONFIGS))
def pair(request: pytest.FixtureRequest, folders: dict[str, Path]) -> tuple[Path, STMultiVectorEncoder, dict]:
    """A folder, sentence-transformers' model of it, and that model's queries, documents and plain encode() of
    TEXTS (computed once: several tests compare with them)."""
    folder = folders[request.param]
    st = STMultiVectorEncoder(str(folder), device="cpu")
    expected = {"query": st.encode_query(TEXTS), "document": st.encode_document(TEXTS), "plain": st.encode(TEXTS)}
    return folder, st, expected


@pytest.fixture(scope="module")
def colbert(folders: dict[str, Path]) -> Path:
    return folders["colbert"]


@pytest.fixture(scope="module")
def spread(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The "colbert" folder with tokens that point different ways (spread_tokens), and sentence-transformers'
    float32 queries and documents of TEXTS, their MaxSim scores, and those of RANKING_DOCUMENTS for RANKING_QUERY."""
    folder = colbert_folder(
        real_model_path, tmp_path_factory.mktemp("spread") / "colbert", **CONFIGS["colbert"], spread_tokens=True
    )
    st = STMultiVectorEncoder(str(folder), device="cpu")
    queries, documents = st.encode_query(TEXTS), st.encode_document(TEXTS)
    ranking = st.similarity(st.encode_query([RANKING_QUERY]), st.encode_document(RANKING_DOCUMENTS))[0]
    return folder, {
        "query": queries,
        "document": documents,
        "scores": st.similarity(queries, documents),
        "ranking": ranking,
    }


def assert_same_tokens(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        a, b = np.asarray(a), b.detach().numpy()
        assert a.dtype == np.float32
        assert a.shape == b.shape, f"text {i}: {a.shape} tokens kept, sentence-transformers {b.shape}"
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_queries_documents_and_scores_equal_sentence_transformers(pair: tuple, unpad: bool) -> None:
    folder, st, expected = pair
    ours = MultiVectorEncoder.from_pretrained(folder, dtype=None, unpad=unpad)
    queries, documents = ours.encode_query(TEXTS), ours.encode_document(TEXTS)
    st_queries, st_documents = expected["query"], expected["document"]
    assert_same_tokens(queries, st_queries)
    assert_same_tokens(documents, st_documents)
    assert_same_tokens(ours.encode(TEXTS, convert_to_numpy=True), expected["plain"])
    # MaxSim scores sum one cosine per query token, so they reach the query's length: a few float32 ulps of that
    torch.testing.assert_close(
        ours.similarity(queries, documents), st.similarity(st_queries, st_documents), atol=1e-5, rtol=1e-6
    )
    torch.testing.assert_close(
        ours.similarity_pairwise(queries, documents),
        st.similarity_pairwise(st_queries, st_documents),
        atol=1e-5,
        rtol=1e-6,
    )


def test_encode_tokenized_equals_encode_query_and_document(pair: tuple) -> None:
    folder, _, expected = pair
    ours = MultiVectorEncoder.from_pretrained(folder, dtype=None)
    # Batches of 2: texts of different kinds and lengths share a batch.
    queries = ours.encode_tokenized(ours.encodings(TEXTS, is_query=True), batch_size=2)
    documents = ours.encode_tokenized(ours.encodings(TEXTS), max_tokens=64)
    assert_same_tokens(queries, expected["query"])
    assert_same_tokens(documents, expected["document"])


def test_options_equal_sentence_transformers(pair: tuple) -> None:
    folder, st, expected = pair
    ours = MultiVectorEncoder.from_pretrained(folder, dtype=None)
    kwargs = {"truncate_dim": 8, "normalize_embeddings": True, "prompt": "search: "}
    assert_same_tokens(ours.encode_query(TEXTS, **kwargs), st.encode_query(TEXTS, **kwargs))
    single = ours.encode_document(TEXTS[0], convert_to_numpy=True)
    assert isinstance(single, np.ndarray)
    assert_same_tokens([single], expected["document"][:1])


def test_markers_fixed_width_queries_and_punctuation_dropped(colbert: Path) -> None:
    ours = MultiVectorEncoder.from_pretrained(colbert, dtype=None)
    query, long_query = ours.encodings(["hi", TEXTS[-1]], is_query=True)
    q_id, mask_id = ours.backend_tokenizer.token_to_id("[Q]"), ours.backend_tokenizer.token_to_id("[MASK]")
    assert query.ids[:2] == [ours.backend_tokenizer.token_to_id("[CLS]"), q_id]
    assert query.ids[4:] == [mask_id] * 8 and len(long_query.ids) == 12
    assert [len(v) for v in ours.encode_query(["hi", TEXTS[-1]])] == [12, 12]
    (document,) = ours.encodings(["hi, there."])
    assert document.ids[1] == ours.backend_tokenizer.token_to_id("[D]")
    # [CLS] [D] hi , there . [SEP]: the comma and the period are not kept.
    assert len(ours.encode_document(["hi, there."])[0]) == 5


def test_refuses_an_embedding_model_naming_the_folder(real_model_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"{real_model_path}.*not a multi-vector.*bertlite\.Embedder"):
        MultiVectorEncoder.from_pretrained(real_model_path)


def test_refuses_a_bare_transformers_folder_and_a_pylate_config(colbert: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"hf: not a multi-vector checkpoint \(no modules.json\)"):
        MultiVectorEncoder.from_pretrained(colbert.with_name("colbert-hf"))
    pylate = tmp_path / "pylate"
    pylate.mkdir()
    (pylate / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "ColBERT"}))
    with pytest.raises(ValueError, match="PyLate.*save_pretrained"):
        MultiVectorEncoder.from_pretrained(pylate)


def test_refuses_a_normalize_without_input_name(colbert: Path, tmp_path: Path) -> None:
    """Unset, sentence-transformers' Normalize reads sentence_embedding: the tokens would go unnormalized."""
    folder = shutil.copytree(colbert, tmp_path / "colbert")
    (folder / "3_Normalize" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"Normalize module's module_input_name is 'sentence_embedding' \(sentence-"):
        MultiVectorEncoder.from_pretrained(folder)


def test_bad_arguments_are_clear_errors(colbert: Path) -> None:
    ours = MultiVectorEncoder.from_pretrained(colbert, dtype=None)
    with pytest.raises(ValueError, match=r"texts\[1\] is tuple"):
        ours.encode(["a", ("b", "c")])
    with pytest.raises(ValueError, match="output_value='sentence_embedding'"):
        ours.encode(["a"], output_value="sentence_embedding")
    with pytest.raises(ValueError, match="truncate_dim=99 must be between 1 and the dimension 16"):
        ours.encode(["a"], truncate_dim=99)
    with pytest.raises(ValueError, match="prompt_name='nope' is not one of the prompts"):
        ours.encode(["a"], prompt_name="nope")
    with pytest.raises(ValueError, match="text 0 .* longer than 40 tokens"):
        ours.encode_document([TEXTS[-1]], on_long="error")
    with pytest.raises(ValueError, match="pairwise scores need as many queries as documents, got 1 and 2"):
        ours.similarity_pairwise(ours.encode_query(["a"]), ours.encode_document(["a", "b"]))


def assert_close_to_float32(ours: MultiVectorEncoder, spread: tuple[Path, dict]) -> None:
    """Per-token cosine with sentence-transformers' float32 vectors: min >= 0.999, mean >= 0.9998 (seen on the
    2-core AVX2 CPU: bf16 0.99986 / 0.99996, int8 0.99995 / 0.99999; 7-bit int8 grids 0.99989 / 0.99996; queries
    whose [MASK] expansion is attended by mistake: 0.980 / 0.998). MaxSim within 1% (seen: 0.3%), and the
    documents of RANKING_QUERY in float32's order."""
    expected = spread[1]
    queries = ours.encode_query(TEXTS, convert_to_numpy=True)
    documents = ours.encode_document(TEXTS, convert_to_numpy=True)
    for task, vectors in (("query", queries), ("document", documents)):
        theirs = expected[task]
        assert [v.shape for v in vectors] == [tuple(t.shape) for t in theirs], task
        assert all(v.dtype == np.float32 for v in vectors), task
        mine = torch.from_numpy(np.concatenate(vectors))
        torch.testing.assert_close(mine.norm(dim=-1), torch.ones(len(mine)), atol=1e-5, rtol=0)
        cosine = torch.nn.functional.cosine_similarity(mine, torch.cat(theirs), dim=-1)
        assert cosine.min() >= 0.999 and cosine.mean() >= 0.9998, (task, cosine.min(), cosine.mean())
    torch.testing.assert_close(ours.similarity(queries, documents), expected["scores"], rtol=0.01, atol=0)
    float32 = expected["ranking"]
    assert (float32.diff() <= -0.1).all(), float32  # well apart: a changed order is an error, not a tie
    scores = ours.similarity(ours.encode_query([RANKING_QUERY]), ours.encode_document(RANKING_DOCUMENTS))[0]
    assert scores.argsort(descending=True).tolist() == list(range(len(RANKING_DOCUMENTS))), (scores, float32)


# A CPU without native bf16 warns (SlowDtypeWarning) and runs slower; the bars do not depend on it.
@pytest.mark.filterwarnings("ignore::bertlite.SlowDtypeWarning")
@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_bfloat16_close_to_float32(spread: tuple[Path, dict], unpad: bool) -> None:
    ours = MultiVectorEncoder.from_pretrained(spread[0], dtype="bfloat16", unpad=unpad)
    assert ours.precision == "bfloat16"
    assert_close_to_float32(ours, spread)


# Some CPUs' int8 kernels are exact only on a 7-bit grid (Int8PrecisionWarning): the bars hold there too.
@pytest.mark.filterwarnings("ignore::bertlite.Int8PrecisionWarning")
@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_int8_close_to_float32_and_ranks_as_float32(spread: tuple[Path, dict], unpad: bool) -> None:
    ours = MultiVectorEncoder.from_pretrained(spread[0], dtype="int8", unpad=unpad)
    assert ours.precision == "int8"
    assert_close_to_float32(ours, spread)
