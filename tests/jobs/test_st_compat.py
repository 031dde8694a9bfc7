"""sentence-transformers' inference API where its own tests use it: each case run on bertlite and on
sentence-transformers in the same test, on tiny folders built here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentence_transformers
import torch
from huggingface_hub import constants as hf_constants

import bertlite
from bertlite.errors import NotCachedError
from tests.helpers import cross_encoder_folder, masked_lm_folder, splade_folder
from tests.serve_helpers import one_torch_thread  # noqa: F401 (an autouse fixture)

TOL = 1e-5
TEXTS = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PAIRS = [("How many people live in Berlin?", "Berlin has 3.5 million people."), ("a cat", "a dog sleeps")]
CPU = {"device": "cpu"}


def as_numpy(value: Any) -> np.ndarray:
    """An output of either library as a dense float64 array."""
    if isinstance(value, torch.Tensor):
        value = value.to_dense() if value.is_sparse else value
        return value.double().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


@pytest.fixture(scope="module")
def splade(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = masked_lm_folder(real_model_path, tmp_path_factory.mktemp("compat") / "mlm")
    return splade_folder(base, base.parent / "splade")


@pytest.fixture(scope="module")
def reranker(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cross_encoder_folder(real_model_path, tmp_path_factory.mktemp("compat") / "reranker", num_labels=1)


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_sentences_keyword_is_inputs_in_sentence_transformer(real_model_path: Path, method: str) -> None:
    ours = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), **CPU)
    with pytest.warns(FutureWarning, match="`sentences` argument was renamed"):
        got = getattr(ours, method)(sentences=TEXTS)
    np.testing.assert_allclose(got, getattr(theirs, method)(sentences=TEXTS), atol=TOL)
    # given both, the new name wins, as in sentence-transformers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        both = getattr(ours, method)(sentences=["ignored"], inputs=TEXTS[:1])
    np.testing.assert_allclose(both, getattr(theirs, method)(TEXTS[:1]), atol=TOL)


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_sentences_keyword_is_inputs_in_sparse_encoder(splade: Path, method: str) -> None:
    ours = bertlite.SparseEncoder(str(splade), **CPU)
    theirs = sentence_transformers.SparseEncoder(str(splade), **CPU)
    with pytest.warns(FutureWarning, match="`sentences` argument was renamed"):
        got = getattr(ours, method)(sentences=TEXTS)
    np.testing.assert_allclose(as_numpy(got), as_numpy(getattr(theirs, method)(sentences=TEXTS)), atol=TOL)


def test_sentences_and_activation_fct_keywords_in_cross_encoder(reranker: Path) -> None:
    ours = bertlite.CrossEncoder(str(reranker), **CPU)
    theirs = sentence_transformers.CrossEncoder(str(reranker), **CPU)
    with pytest.warns(FutureWarning, match="`sentences` argument was renamed"):
        got = ours.predict(sentences=PAIRS, activation_fn=torch.nn.Identity())
    expected = theirs.predict(sentences=PAIRS, activation_fct=torch.nn.Identity())
    np.testing.assert_allclose(got, expected, atol=TOL)
    with pytest.warns(FutureWarning, match="`activation_fct` argument was renamed"):
        ranked = ours.rank(PAIRS[0][0], [b for _, b in PAIRS], activation_fct=torch.nn.Identity())
    expected_ranks = theirs.rank(PAIRS[0][0], [b for _, b in PAIRS], activation_fct=torch.nn.Identity())
    assert [r["corpus_id"] for r in ranked] == [r["corpus_id"] for r in expected_ranks]
    np.testing.assert_allclose([r["score"] for r in ranked], [r["score"] for r in expected_ranks], atol=TOL)


# The older CrossEncoder layouts: config.json alone says the activation (sentence-transformers 2/3, then 4),
# or nothing does (a plain transformers classifier, as BAAI/bge-reranker-* are saved).
OLDER_CROSS_ENCODER_CONFIG = {
    "plain": {},
    "sbert_ce_default_activation_function": {
        "sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"
    },
    "sentence_transformers": {"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Tanh"}},
}


def older_cross_encoder(real_model_path: Path, folder: Path, layout: str, num_labels: int = 1) -> Path:
    """A transformers BertForSequenceClassification and its tokenizer, saved by transformers, with `layout`'s
    keys added to config.json: no sentence-transformers file."""
    cross_encoder_folder(real_model_path, folder, num_labels=num_labels, save_with_st=False)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **OLDER_CROSS_ENCODER_CONFIG[layout]}))
    return folder


@pytest.mark.parametrize("num_labels", [1, 3])
@pytest.mark.parametrize("layout", list(OLDER_CROSS_ENCODER_CONFIG))
def test_cross_encoder_loads_older_and_plain_classifier_folders(
    real_model_path: Path, tmp_path: Path, layout: str, num_labels: int
) -> None:
    folder = older_cross_encoder(real_model_path, tmp_path / layout, layout, num_labels)
    assert not any(folder.glob("*sentence*"))
    ours = bertlite.CrossEncoder(str(folder), **CPU)
    theirs = sentence_transformers.CrossEncoder(str(folder), **CPU)
    np.testing.assert_allclose(ours.predict(PAIRS), theirs.predict(PAIRS), atol=TOL, rtol=0)
    ranked = (
        [(r["corpus_id"], r["score"]) for r in ours.rank("a query", ["one doc", "another doc"])]
        if num_labels == 1
        else []
    )
    expected = (
        [(r["corpus_id"], r["score"]) for r in theirs.rank("a query", ["one doc", "another doc"])]
        if num_labels == 1
        else []
    )
    assert [i for i, _ in ranked] == [i for i, _ in expected]
    np.testing.assert_allclose([s for _, s in ranked], [s for _, s in expected], atol=TOL, rtol=0)


def cache_repo(cache: Path, folder: Path, repo_id: str) -> None:
    """`folder`'s files (subfolders too) as the one snapshot of hub repo `repo_id` in the hub cache `cache`, in
    huggingface_hub's layout (blobs, relative symlinks, refs/main)."""
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    for src in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / src.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)  # no newline, as huggingface_hub writes it


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub offline: it reads HF_HUB_OFFLINE at import, so its constant is patched too."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)


# Files a hub repo may lack, each set removed from the all-MiniLM-L6-v2 folder before it is cached.
MISSING = {
    "sentence_bert_config": ["sentence_bert_config.json"],
    "no_sentence_transformers_files": [
        "sentence_bert_config.json",
        "modules.json",
        "1_Pooling",
        "config_sentence_transformers.json",
    ],
    "tokenizer_config": ["tokenizer_config.json", "special_tokens_map.json"],
}


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("missing", list(MISSING))
def test_offline_hub_repo_without_optional_files_loads_as_sentence_transformers(
    real_model_path: Path, tmp_path: Path, missing: str
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(real_model_path, folder, ignore=shutil.ignore_patterns(*MISSING[missing], "onnx", "openvino"))
    cache_repo(tmp_path / "hub", folder, "org/model")
    shutil.rmtree(folder)
    options = {"cache_folder": str(tmp_path / "hub"), **CPU}
    ours = bertlite.SentenceTransformer("org/model", **options)
    theirs = sentence_transformers.SentenceTransformer("org/model", **options)
    assert ours.max_seq_length == theirs.max_seq_length
    np.testing.assert_allclose(ours.encode(TEXTS), theirs.encode(TEXTS), atol=TOL)


@pytest.mark.usefixtures("offline")
def test_offline_hub_cross_encoder_without_sentence_transformers_files(real_model_path: Path, tmp_path: Path) -> None:
    folder = older_cross_encoder(real_model_path, tmp_path / "reranker", "plain")
    cache_repo(tmp_path / "hub", folder, "org/reranker")
    shutil.rmtree(folder)
    options = {"cache_folder": str(tmp_path / "hub"), **CPU}
    ours = bertlite.CrossEncoder("org/reranker", **options)
    theirs = sentence_transformers.CrossEncoder("org/reranker", **options)
    np.testing.assert_allclose(ours.predict(PAIRS), theirs.predict(PAIRS), atol=TOL, rtol=0)


@pytest.mark.usefixtures("offline")
def test_offline_repo_not_cached_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(NotCachedError, match="org/absent: config.json is not in the Hugging Face cache"):
        bertlite.SentenceTransformer("org/absent", cache_folder=str(tmp_path), **CPU)


def test_similarity_function_names_are_sentence_transformers() -> None:
    assert bertlite.SimilarityFunction.possible_values() == sentence_transformers.SimilarityFunction.possible_values()
    for name in ("SentenceTransformer", "SparseEncoder", "MultiVectorEncoder"):
        ours, theirs = getattr(bertlite, name), getattr(sentence_transformers, name)
        assert ours.SUPPORTED_SIMILARITY_FN_NAMES == theirs.SUPPORTED_SIMILARITY_FN_NAMES, name


SINGULAR_INPUTS = [
    "hello",
    ["hello", "world"],
    ("hello", "world"),
    [],
    [{"role": "user", "content": "hi"}],
    [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]],
    [{"text": "a"}, {"text": "b"}],
    np.array([1, 2, 3]),
    np.array(["hello", "world"]),
    np.array([["q1", "d1"], ["q2", "d2"]]),
    np.array([b"hello", b"world"]),
    np.array(["hello", "world"], dtype=object),
    np.array("hello"),
    np.array([], dtype=str),
    torch.tensor([1, 2, 3]),
    [["q", "d"]],
    [("q", "d"), ("q2", "d2")],
]


def test_is_singular_input_is_sentence_transformers(real_model_path: Path, reranker: Path) -> None:
    embedder = sentence_transformers.SentenceTransformer(str(real_model_path), **CPU)
    cross_encoder = sentence_transformers.CrossEncoder(str(reranker), **CPU)
    for i, inputs in enumerate(SINGULAR_INPUTS):
        assert bertlite.SentenceTransformer.is_singular_input(inputs) is embedder.is_singular_input(inputs), i
        assert bertlite.SparseEncoder.is_singular_input(inputs) is embedder.is_singular_input(inputs), i
        assert bertlite.CrossEncoder.is_singular_input(inputs) is cross_encoder.is_singular_input(inputs), i


def test_intersection_is_sentence_transformers(splade: Path) -> None:
    ours = bertlite.SparseEncoder(str(splade), **CPU)
    theirs = sentence_transformers.SparseEncoder(str(splade), **CPU)
    query, documents = theirs.encode_query(TEXTS[0]), theirs.encode_document(TEXTS)
    for second in (documents[1], documents, documents.to_dense()):
        got, expected = ours.intersection(query, second), theirs.intersection(query, second)
        assert got.is_sparse and got.shape == expected.shape
        np.testing.assert_allclose(as_numpy(got), as_numpy(expected), atol=0)
    assert ours.decode(ours.intersection(query, documents[0]), top_k=3) == theirs.decode(
        theirs.intersection(query, documents[0]), top_k=3
    )
    with pytest.raises(ValueError, match="Expected 1D tensor for embeddings_1"):
        ours.intersection(documents, query)


def test_truncate_embeddings_context_and_precision_none(real_model_path: Path) -> None:
    ours = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), **CPU)
    with ours.truncate_embeddings(16), theirs.truncate_embeddings(16):
        got, expected = ours.encode(TEXTS, normalize_embeddings=True), theirs.encode(TEXTS, normalize_embeddings=True)
        assert got.shape == expected.shape == (3, 16)
        np.testing.assert_allclose(got, expected, atol=TOL)
        assert ours.get_embedding_dimension() == theirs.get_embedding_dimension() == 16
    assert ours.truncate_dim is None and ours.encode(TEXTS).shape == (3, 384)
    got, expected = ours.encode(TEXTS, precision=None), theirs.encode(TEXTS, precision=None)
    assert got.dtype == expected.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=TOL)
    with pytest.raises(ValueError, match="Precision 'int4' is not supported"):
        ours.encode(TEXTS, precision="int4")


@pytest.fixture(scope="module")
def inference_free(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sentence-transformers' inference-free SPLADE: a Router with a SparseStaticEmbedding (random weights) for
    queries and the masked-LM Transformer and SpladePooling for documents, saved."""
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling

    base = masked_lm_folder(real_model_path, tmp_path_factory.mktemp("router") / "mlm")
    document = Transformer(str(base), transformer_task="fill-mask")
    query = SparseStaticEmbedding(tokenizer=document.tokenizer, frozen=False)
    torch.manual_seed(0)
    with torch.no_grad():
        query.weight.uniform_(0.0, 2.0)
    router = Router.for_query_document(query_modules=[query], document_modules=[document, SpladePooling("max")])
    model = sentence_transformers.SparseEncoder(modules=[router], similarity_fn_name="dot", **CPU)
    model.save(str(base.parent / "router"))
    return base.parent / "router"


@pytest.mark.parametrize("options", [{}, {"max_active_dims": 5}, {"convert_to_sparse_tensor": False}])
def test_inference_free_splade_is_sentence_transformers(inference_free: Path, options: dict[str, Any]) -> None:
    ours = bertlite.SparseEncoder(str(inference_free), **CPU)
    theirs = sentence_transformers.SparseEncoder(str(inference_free), **CPU)
    texts = [*TEXTS, "the the cat " * 40]  # a repeated token weighs once; the long one is truncated
    for method in ("encode_query", "encode_document", "encode"):
        got, expected = getattr(ours, method)(texts, **options), getattr(theirs, method)(texts, **options)
        assert got.is_sparse == expected.is_sparse and got.shape == expected.shape, method
        np.testing.assert_allclose(as_numpy(got), as_numpy(expected), atol=TOL, err_msg=method)
    one = ours.encode_query(TEXTS[0])
    assert one.shape == (ours.vocab_size,)
    assert ours.decode(one, top_k=4) == theirs.decode(theirs.encode_query(TEXTS[0]), top_k=4)
    # the query side runs no model: its vectors are the weights of the query's tokens
    assert float(ours.similarity(ours.encode_query(TEXTS[:1]), ours.encode_document(TEXTS[:1]))[0, 0]) > 0


def test_inference_free_splade_is_not_saved(inference_free: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="saving inference-free SPLADE"):
        bertlite.SparseEncoder(str(inference_free), **CPU).save(str(tmp_path / "copy"))


def test_cross_encoder_older_keywords_and_numpy_pairs(reranker: Path) -> None:
    with pytest.warns(FutureWarning, match="`classifier_dropout` argument is deprecated"):
        ours = bertlite.CrossEncoder(str(reranker), classifier_dropout=0.1234, **CPU)
    theirs = sentence_transformers.CrossEncoder(str(reranker), classifier_dropout=0.1234, **CPU)
    assert ours.config.classifier_dropout == theirs.config.classifier_dropout == 0.1234
    with pytest.warns(FutureWarning, match="`automodel_args` argument was renamed"):
        f32 = bertlite.CrossEncoder(str(reranker), automodel_args={"torch_dtype": torch.float32}, **CPU)
    assert f32.model.dtype == torch.float32
    pairs = np.array([list(pair) for pair in PAIRS])
    for inputs in (pairs, pairs[0], np.array([], dtype=str), pairs.astype(object)):
        got, expected = ours.predict(inputs), theirs.predict(inputs)
        assert type(got) is type(expected) and np.shape(got) == np.shape(expected)
        np.testing.assert_allclose(got, expected, atol=TOL)
    np.testing.assert_allclose(ours.predict(inputs=pairs), theirs.predict(inputs=pairs), atol=TOL)


def test_numpy_array_of_texts_is_a_list_of_texts(real_model_path: Path, splade: Path) -> None:
    texts = np.array(TEXTS)
    ours = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), **CPU)
    for method in ("encode", "encode_query", "encode_document"):
        np.testing.assert_allclose(getattr(ours, method)(texts), getattr(theirs, method)(texts), atol=TOL)
    sparse_ours = bertlite.SparseEncoder(str(splade), **CPU)
    sparse_theirs = sentence_transformers.SparseEncoder(str(splade), **CPU)
    np.testing.assert_allclose(as_numpy(sparse_ours.encode(texts)), as_numpy(sparse_theirs.encode(texts)), atol=TOL)
    with pytest.warns(FutureWarning, match="`tokenizer_kwargs` argument was renamed"):
        with pytest.raises(ValueError, match="processor_kwargs"):
            bertlite.SentenceTransformer(str(real_model_path), tokenizer_kwargs={"model_max_length": 8}, **CPU)


def encode_calls(model: Any, method: str, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> dict[str, Any]:
    """The keywords `model.<method>(**kwargs)` calls model.encode with (encode replaced by a spy)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(model, "encode", lambda *args, **keywords: calls.append({"args": args, **keywords}))
    getattr(model, method)(**kwargs)
    assert len(calls) == 1
    return calls[0]


@pytest.mark.parametrize("method", ["encode_query", "encode_document"])
@pytest.mark.parametrize("prompts", [{"prompt_name": None, "prompt": None}, {"prompt_name": "custom", "prompt": None}])
def test_encode_query_and_document_call_encode_as_sentence_transformers(
    real_model_path: Path, splade: Path, monkeypatch: pytest.MonkeyPatch, method: str, prompts: dict
) -> None:
    """Code that wraps encode (sentence-transformers' own tests spy on it) sees the same call."""
    pairs = [
        (bertlite.SentenceTransformer(str(real_model_path), **CPU), sentence_transformers.SentenceTransformer),
        (bertlite.SparseEncoder(str(splade), **CPU), sentence_transformers.SparseEncoder),
    ]
    for ours, theirs_class in pairs:
        theirs = theirs_class(
            str(splade if theirs_class is sentence_transformers.SparseEncoder else real_model_path), **CPU
        )
        for model in (ours, theirs):
            model.prompts = {"query": "query: ", "passage": "passage: ", "custom": "custom: "}
        options = {"sentences": TEXTS[:2], "batch_size": 8, **prompts}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            got = encode_calls(ours, method, monkeypatch, **options)
        expected = encode_calls(theirs, method, monkeypatch, **options)
        assert got["args"] == expected["args"] == ()
        shared = sorted(set(expected) & set(got))
        assert {key: got[key] for key in shared} == {key: expected[key] for key in shared}
        assert {"inputs", "prompt_name", "prompt", "task"} <= set(shared)


def test_inference_free_splade_routes_encode_by_task(inference_free: Path) -> None:
    ours = bertlite.SparseEncoder(str(inference_free), **CPU)
    theirs = sentence_transformers.SparseEncoder(str(inference_free), **CPU)
    for task in ("query", "document"):
        np.testing.assert_allclose(
            as_numpy(ours.encode(TEXTS, task=task)), as_numpy(theirs.encode(TEXTS, task=task)), atol=TOL
        )
    with pytest.raises(ValueError, match=r"additional keyword arguments that this model does not use: \['colour'\]"):
        ours.encode(TEXTS, colour="blue")


def test_truncate_dim_above_the_dimension_and_every_output(real_model_path: Path) -> None:
    ours = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), **CPU)
    for model in (ours, theirs):
        model.truncate_dim = 2 * 384  # above the model's length: every dimension, as sentence-transformers keeps
    assert ours.get_embedding_dimension() == theirs.get_embedding_dimension() == 384
    np.testing.assert_allclose(ours.encode(TEXTS), theirs.encode(TEXTS), atol=TOL)
    with ours.truncate_embeddings(16), theirs.truncate_embeddings(16):
        got, expected = ours.encode(TEXTS, output_value=None), theirs.encode(TEXTS, output_value=None)
        for row, row_expected in zip(got, expected, strict=True):
            assert row["sentence_embedding"].shape == row_expected["sentence_embedding"].shape == (16,)
            np.testing.assert_allclose(row["sentence_embedding"], row_expected["sentence_embedding"], atol=TOL)


def test_util_community_detection_pytorch_cos_sim_and_angle_sim() -> None:
    from sentence_transformers import util as st_util

    generator = torch.Generator().manual_seed(0)
    centers = torch.randn(6, 32, generator=generator)
    # clusters of different sizes around six centers, and some noise
    embeddings = torch.cat(
        [centers[i] + 0.3 * torch.randn(size, 32, generator=generator) for i, size in enumerate((30, 12, 9, 5, 25, 3))]
        + [torch.randn(20, 32, generator=generator)]
    )
    embeddings = embeddings[torch.randperm(len(embeddings), generator=generator)]
    for threshold, size, batch in ((0.75, 10, 1024), (0.6, 3, 7), (0.9, 2, 16), (0.5, 200, 32)):
        got = bertlite.util.community_detection(embeddings, threshold, size, batch)
        assert got == st_util.community_detection(embeddings, threshold, size, batch), (threshold, size)
    assert bertlite.util.community_detection(embeddings.numpy()[:0]) == st_util.community_detection(embeddings[:0])
    a, b = embeddings[:5], embeddings[5:12]
    torch.testing.assert_close(bertlite.util.pytorch_cos_sim(a, b), st_util.pytorch_cos_sim(a, b))
    for x, y in ((a, embeddings[5:10]), (a[:, :31], embeddings[5:10, :31]), (a.to_sparse(), embeddings[5:10].numpy())):
        torch.testing.assert_close(bertlite.util.pairwise_angle_sim(x, y), st_util.pairwise_angle_sim(x, y))


def raised(call: Any, *args: Any, **kwargs: Any) -> str:
    """The message of the ValueError or TypeError `call(*args, **kwargs)` raises."""
    with pytest.raises((ValueError, TypeError)) as info:
        call(*args, **kwargs)
    return str(info.value)


def test_errors_say_what_sentence_transformers_says(real_model_path: Path, splade: Path) -> None:
    """The phrases sentence-transformers' own tests match in these errors are in bertlite's too."""
    path, prompts = str(real_model_path), {"query": "q: ", "document": "d: "}
    for cls in (sentence_transformers.SentenceTransformer, bertlite.SentenceTransformer):
        assert "Both `token` and `use_auth_token`" in raised(cls, path, token="a", use_auth_token="b")
        message = raised(cls, path, prompts=prompts, default_prompt_name="nope", **CPU)
        assert "Default prompt name 'nope' not found in the configured prompts dictionary with keys" in message
        assert "['query', 'document']" in message
    sparse = bertlite.SparseEncoder(str(splade), **CPU)
    for model in (bertlite.SentenceTransformer(path, **CPU), sparse):
        assert "Use MultiVectorEncoder for MaxSim" in raised(setattr, model, "similarity_fn_name", "maxsim")
    assert "Expected torch.Tensor" in raised(sparse.decode, [1, 2, 3])
    assert "Input tensor must be 1D or 2D" in raised(sparse.decode, torch.zeros(2, 3, 4))
    assert bertlite.SentenceTransformer(path, **CPU).save(None) is None  # writes nothing, as sentence-transformers


def test_device_map_of_the_whole_model(real_model_path: Path, reranker: Path) -> None:
    """model_kwargs={"device_map": {"": device}} puts the whole model on that device, as sentence-transformers."""
    options = {"model_kwargs": {"device_map": {"": "cpu"}}}
    for name, path in (("SentenceTransformer", real_model_path), ("CrossEncoder", reranker)):
        ours, theirs = (
            getattr(bertlite, name)(str(path), **options),
            getattr(sentence_transformers, name)(str(path), **options),
        )
        assert ours.device == theirs.device == torch.device("cpu"), name
    with pytest.raises(ValueError, match="bertlite runs a model on one device"):
        bertlite.SentenceTransformer(
            str(real_model_path), model_kwargs={"device_map": {"encoder": "cpu", "pooler": "meta"}}
        )


def test_cross_encoder_default_activation_function(reranker: Path) -> None:
    ours = bertlite.CrossEncoder(str(reranker), **CPU)
    theirs = sentence_transformers.CrossEncoder(str(reranker), **CPU)
    for model in (ours, theirs):
        with pytest.warns(DeprecationWarning, match="The `default_activation_function` property was renamed"):
            activation = model.default_activation_function
        assert type(activation) is torch.nn.Sigmoid and activation is model.activation_fn


def test_trust_remote_code_runs_bertlite_for_a_family_it_implements(real_model_path: Path, tmp_path: Path) -> None:
    """GTE's original layout names its own code (model_type "new", auto_map); bertlite runs its GteModel instead."""
    from tests.models.test_gte import build_tokenizer, make_hf
    from tests.models.test_gte_original import write_original

    folder = write_original(make_hf("Model", "types"), tmp_path / "new")
    build_tokenizer(folder)
    texts = ["the list of items", "sort a <mask> by value"]
    trusted = bertlite.SentenceTransformer(str(folder), trust_remote_code=True, **CPU)
    assert type(trusted.transformers_model).__name__ == "GteModel"
    np.testing.assert_array_equal(trusted.encode(texts), bertlite.SentenceTransformer(str(folder), **CPU).encode(texts))
    for name, config, message in (
        ("unknown", {"model_type": "xlnet"}, "model_type 'xlnet' is not a family bertlite implements"),
        ("own_code", {"model_type": "bert", "auto_map": {"AutoModel": "x--m.M"}}, "names its own code \\(auto_map\\)"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=message):
            bertlite.SentenceTransformer(str(tmp_path / name), trust_remote_code=True, **CPU)


def test_model_kwargs_attention_and_the_transformers_model(real_model_path: Path, reranker: Path) -> None:
    """attn_implementation="eager" runs the eager reference; low_cpu_mem_usage is taken and changes nothing."""
    options = {"model_kwargs": {"attn_implementation": "eager", "low_cpu_mem_usage": False}}
    for name, path in (("SentenceTransformer", real_model_path), ("CrossEncoder", reranker)):
        model = getattr(bertlite, name)(str(path), **options, **CPU)
        assert model.transformers_model is model.model and model.transformers_model.attn_implementation == "eager"
        assert all(p.device.type == "cpu" for p in model.parameters())
    default = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    eager = bertlite.SentenceTransformer(str(real_model_path), **options, **CPU)
    np.testing.assert_allclose(eager.encode(["a b c", "d"]), default.encode(["a b c", "d"]), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="attn_implementation='flex_attention' must be one of"):
        bertlite.SentenceTransformer(str(real_model_path), model_kwargs={"attn_implementation": "flex_attention"})


def test_what_sentence_transformers_logs_is_logged(
    real_model_path: Path, reranker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = bertlite.SentenceTransformer(str(real_model_path), prompts={"query": "query: "}, **CPU)
    with caplog.at_level("WARNING", logger="bertlite.jobs.st"):
        both = model.encode(["a b"], prompt="query: ", prompt_name="query")
        model.tokenize(["a b"])
        bertlite.CrossEncoder(str(reranker), **CPU).rank("q", ["d"], convert_to_numpy=True)
    np.testing.assert_array_equal(both, model.encode(["a b"], prompt="query: "))
    assert [r.name for r in caplog.records] == ["bertlite.jobs.st"] * 3
    assert "Ignoring the `prompt_name` in favor of `prompt`" in caplog.records[0].message
    assert "`tokenize` method is deprecated" in caplog.records[1].message
    assert "rank `convert_to_numpy` argument is deprecated" in caplog.records[2].message
    with pytest.raises(ValueError, match="Prompt name 'nope' not found in the configured prompts dictionary"):
        model.encode(["a b"], prompt_name="nope")


def test_processing_kwargs_give_one_call_its_max_length(real_model_path: Path, reranker: Path) -> None:
    model = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    text = "this sentence is much longer than four tokens for sure"
    short = {"text": {"max_length": 4, "truncation": True}}
    np.testing.assert_array_equal(model.encode(text, processing_kwargs=short), model.encode("this sentence"))
    assert model.max_seq_length != 4 and model.tokenizer.model_max_length != 4  # the model's own are unchanged
    cross = bertlite.CrossEncoder(str(reranker), **CPU)
    assert cross.predict([("a b c d e f", "g h i j k")], processing_kwargs=short).shape == (1,)
    with pytest.raises(ValueError, match=r"processing_kwargs\['text'\]\['padding'\]='max_length' is not honoured"):
        model.encode(text, processing_kwargs={"text": {"padding": "max_length"}})
    with pytest.raises(ValueError, match=r"processing_kwargs\['image'\]: bertlite reads text only"):
        model.encode(text, processing_kwargs={"image": {}})


def test_a_custom_activation_is_logged_untrusted_and_refused_when_trusted(
    reranker: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "custom"
    shutil.copytree(reranker, folder)
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    config["activation_fn"] = "my_package.activations.Custom"
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    with caplog.at_level("WARNING", logger="bertlite.jobs.st"):
        model = bertlite.CrossEncoder(str(folder), **CPU)
    assert type(model.activation_fn) is torch.nn.Sigmoid
    assert "Activation function path 'my_package.activations.Custom' is not trusted" in caplog.text
    with pytest.raises(ValueError, match="activation_fn 'my_package.activations.Custom' is code bertlite does not run"):
        bertlite.CrossEncoder(str(folder), trust_remote_code=True, **CPU)
    trusted = bertlite.CrossEncoder(str(folder), trust_remote_code=True, activation_fn=torch.nn.Identity(), **CPU)
    assert type(trusted.activation_fn) is torch.nn.Identity
