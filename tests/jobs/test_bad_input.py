"""Bad arguments to every job's public methods: a one-line error naming the argument and what it must be.

The texts argument as None, a number or a dict; a string where a list of documents belongs; counts given as
floats or strings; a sparse vector whose indices leave the vocabulary. Each class is a tiny random checkpoint
built here (the real tokenizer), in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import bertlite
from bertlite.jobs.m3 import M3Encoder
from tests.helpers import bert_m3_folder, colbert_folder, cross_encoder_folder, masked_lm_folder, splade_folder

CLASSES = ("Embedder", "SentenceTransformer", "CrossEncoder", "SparseEncoder", "MultiVectorEncoder", "M3Encoder")
PINNED = {"model_kwargs": {"dtype": torch.float32}, "device": "cpu"}


@pytest.fixture(scope="module")
def jobs(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bad-input")
    splade = splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade")
    return {
        "Embedder": bertlite.Embedder.from_pretrained(real_model_path, dtype="float32"),
        "SentenceTransformer": bertlite.SentenceTransformer(str(real_model_path), **PINNED),
        "CrossEncoder": bertlite.CrossEncoder(str(cross_encoder_folder(real_model_path, root / "ce", num_labels=1))),
        "SparseEncoder": bertlite.SparseEncoder(str(splade), **PINNED),
        "MultiVectorEncoder": bertlite.MultiVectorEncoder(str(colbert_folder(real_model_path, root / "cb")), **PINNED),
        "M3Encoder": M3Encoder.from_pretrained(bert_m3_folder(real_model_path, root / "m3"), dtype="float32"),
    }


# Per class, its public methods that take texts: (name, the argument's name, a call with the texts).
TEXT_METHODS: dict[str, list[tuple[str, str, Callable[[Any, Any], Any]]]] = {
    "Embedder": [
        ("encode", "texts", lambda job, x: job.encode(x)),
        ("encode_query", "texts", lambda job, x: job.encode_query(x)),
        ("encode_document", "texts", lambda job, x: job.encode_document(x)),
        ("encode_chunks", "texts", lambda job, x: list(job.encode_chunks(x))),
        ("encodings", "texts", lambda job, x: job.encodings(x)),
        ("preprocess", "inputs", lambda job, x: job.preprocess(x)),
    ],
    "SentenceTransformer": [
        ("encode", "inputs", lambda job, x: job.encode(x)),
        ("encode_query", "inputs", lambda job, x: job.encode_query(x)),
        ("encode_document", "inputs", lambda job, x: job.encode_document(x)),
        ("tokenize", "inputs", lambda job, x: job.tokenize(x)),
    ],
    "CrossEncoder": [
        ("predict", "inputs", lambda job, x: job.predict(x)),
        ("rank", "documents", lambda job, x: job.rank("a query", x)),
    ],
    "SparseEncoder": [
        ("encode", "inputs", lambda job, x: job.encode(x)),
        ("encode_query", "inputs", lambda job, x: job.encode_query(x)),
        ("encode_document", "inputs", lambda job, x: job.encode_document(x)),
    ],
    "MultiVectorEncoder": [
        ("encode", "inputs", lambda job, x: job.encode(x)),
        ("encode_query", "inputs", lambda job, x: job.encode_query(x)),
        ("encode_document", "inputs", lambda job, x: job.encode_document(x)),
        ("encodings", "texts", lambda job, x: job.encodings(x)),
    ],
    "M3Encoder": [
        ("encode", "sentences", lambda job, x: job.encode(x)),
        ("encode_queries", "queries", lambda job, x: job.encode_queries(x)),
        ("encode_corpus", "corpus", lambda job, x: job.encode_corpus(x)),
    ],
}
TEXT_CASES = [(cls, *method) for cls in CLASSES for method in TEXT_METHODS[cls]]


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("bad", [None, 3, 2.5], ids=["None", "int", "float"])
@pytest.mark.parametrize(("cls", "method", "argument", "call"), TEXT_CASES, ids=[f"{c[0]}.{c[1]}" for c in TEXT_CASES])
def test_texts_that_are_no_list_are_named(
    jobs: dict[str, Any], cls: str, method: str, argument: str, call: Callable, bad: Any
) -> None:
    with pytest.raises(TypeError) as error:
        call(jobs[cls], bad)
    assert one_line(error).startswith(f"{argument} must be a "), one_line(error)
    assert type(bad).__name__ in one_line(error)


@pytest.mark.parametrize(("cls", "method", "argument", "call"), TEXT_CASES, ids=[f"{c[0]}.{c[1]}" for c in TEXT_CASES])
def test_a_dict_of_texts_is_refused(jobs: dict[str, Any], cls: str, method: str, argument: str, call: Callable) -> None:
    # Its keys are texts (or pairs) that would be encoded; sentence-transformers 6 refuses a dict.
    texts = {("a", "b"): "c"} if cls == "CrossEncoder" and method == "predict" else {"a text": "another"}
    with pytest.raises(TypeError, match=rf"^{argument} must be a .*, got dict "):
        call(jobs[cls], texts)


def test_rank_refuses_one_string_as_the_documents(jobs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"^documents must be a list of str, got a single str"):
        jobs["CrossEncoder"].rank("a query", "one document")
    with pytest.raises(TypeError, match=r"^inputs must be a \(text_a, text_b\) pair or a list of such pairs, got a"):
        jobs["CrossEncoder"].predict("one text")


# Per class, its calls that take a batch_size.
BATCH_SIZE_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "Embedder": lambda job, n: job.encode(["a text"], batch_size=n),
    "SentenceTransformer": lambda job, n: job.encode(["a text"], batch_size=n),
    "CrossEncoder": lambda job, n: job.predict([("a", "b")], batch_size=n),
    "SparseEncoder": lambda job, n: job.encode(["a text"], batch_size=n),
    "MultiVectorEncoder": lambda job, n: job.encode(["a text"], batch_size=n),
    "M3Encoder": lambda job, n: job.encode(["a text"], batch_size=n),
}


@pytest.mark.parametrize("bad", ["8", 2.5, True], ids=["str", "float", "bool"])
@pytest.mark.parametrize("cls", CLASSES)
def test_batch_size_that_is_no_integer_is_named(jobs: dict[str, Any], cls: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^batch_size must be (an integer >= 1|a positive integer)"):
        BATCH_SIZE_CALLS[cls](jobs[cls], bad)
    with pytest.raises(ValueError, match=r"^batch_size must be"):
        jobs["CrossEncoder"].rank("a query", ["a document"], batch_size=bad)
    # On an empty input too: the argument is checked before the texts are read.
    with pytest.raises(ValueError, match=r"^batch_size must be"):
        BATCH_SIZE_CALLS[cls](jobs[cls], bad) if cls != "CrossEncoder" else jobs[cls].predict([], batch_size=bad)


@pytest.mark.parametrize("cls", CLASSES)
def test_batch_size_none(jobs: dict[str, Any], cls: str) -> None:
    """None means bertlite's default batching where bertlite documents it; sentence-transformers' own
    SentenceTransformer.encode takes only an int (its batch_size <= 0 test raises on None), so there it is refused."""
    if cls == "SentenceTransformer":
        with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got None"):
            BATCH_SIZE_CALLS[cls](jobs[cls], None)
    else:
        BATCH_SIZE_CALLS[cls](jobs[cls], None)


TRUNCATE_DIM_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "Embedder": lambda job, n: job.encode(["a text"], truncate_dim=n),
    "SentenceTransformer": lambda job, n: job.encode(["a text"], truncate_dim=n),
    "SentenceTransformer-every-output": lambda job, n: job.encode(["a text"], truncate_dim=n, output_value=None),
    "MultiVectorEncoder": lambda job, n: job.encode(["a text"], truncate_dim=n),
}


@pytest.mark.parametrize("bad", [2.5, "128", True], ids=["float", "str", "bool"])
@pytest.mark.parametrize("call", TRUNCATE_DIM_CALLS)
def test_truncate_dim_that_is_no_integer_is_named(jobs: dict[str, Any], call: str, bad: Any) -> None:
    job = jobs[call.split("-")[0]]
    with pytest.raises(ValueError, match=r"^truncate_dim must be an integer >= 1 \(or None for every dimension\)"):
        TRUNCATE_DIM_CALLS[call](job, bad)


def test_truncate_dim_at_load_is_named(real_model_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^truncate_dim must be an integer >= 1"):
        bertlite.Embedder.from_pretrained(real_model_path, dtype="float32", truncate_dim="128")
    with pytest.raises(ValueError, match=r"^truncate_dim must be an integer >= 1"):
        bertlite.SentenceTransformer(str(real_model_path), truncate_dim=2.5, **PINNED)
    with pytest.raises(ValueError, match=r"^truncate_dim=999 must be between 1 and the dimension 384"):
        bertlite.Embedder.from_pretrained(real_model_path, dtype="float32", truncate_dim=999)


@pytest.mark.parametrize("bad", ["3", 2.5, 0], ids=["str", "float", "zero"])
def test_decode_top_k_that_is_no_positive_integer_is_named(jobs: dict[str, Any], bad: Any) -> None:
    job = jobs["SparseEncoder"]
    with pytest.raises(ValueError, match=r"^top_k must be a positive integer \(or None for all non-zero entries\)"):
        job.decode(job.encode("a text"), top_k=bad)


@pytest.mark.parametrize(
    ("indices", "values", "message"),
    [
        ([5, 30522], [1.0, 2.0], r"^embeddings holds index 30522; an index must be a vocabulary id from 0 to 30521$"),
        ([-1, 5], [1.0, 2.0], r"^embeddings holds index -1; an index must be a vocabulary id from 0 to 30521$"),
        ([1, 2, 3], [1.0], r"^embeddings' \(indices, values\) must be two 1-D sequences of one length, got shapes"),
        ([[1, 2]], [[1.0, 2.0]], r"^embeddings' \(indices, values\) must be two 1-D sequences of one length"),
    ],
    ids=["past-the-vocabulary", "negative", "count-mismatch", "2-D"],
)
def test_decode_refuses_a_row_outside_the_vocabulary(
    jobs: dict[str, Any], indices: list, values: list, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        jobs["SparseEncoder"].decode((indices, values))


def test_decode_refuses_a_tensor_wider_than_the_vocabulary(jobs: dict[str, Any]) -> None:
    wide = torch.zeros(2, 30530)
    wide[1, 30525] = 1.0
    with pytest.raises(ValueError, match=r"^embeddings holds index 30525; an index must be a vocabulary id"):
        jobs["SparseEncoder"].decode(wide)
    row = jobs["SparseEncoder"].encode_tokenized(jobs["SparseEncoder"].encodings(["a text"]))[0]
    assert jobs["SparseEncoder"].decode(row, top_k=2) == jobs["SparseEncoder"].decode(
        jobs["SparseEncoder"].encode("a text"), top_k=2
    )


CHUNK_SIZE_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "SentenceTransformer": lambda job, n: job.encode(["a text"], pool={}, chunk_size=n),
    "CrossEncoder": lambda job, n: job.predict([("a", "b")], pool={}, chunk_size=n),
    "CrossEncoder-rank": lambda job, n: job.rank("a query", ["a document"], pool={}, chunk_size=n),
    "SparseEncoder": lambda job, n: job.encode(["a text"], pool={}, chunk_size=n),
    "MultiVectorEncoder": lambda job, n: job.encode(["a text"], pool={}, chunk_size=n),
}


@pytest.mark.parametrize("bad", ["3", 2.5, 0], ids=["str", "float", "zero"])
@pytest.mark.parametrize("call", CHUNK_SIZE_CALLS)
def test_chunk_size_that_is_no_positive_integer_is_named(jobs: dict[str, Any], call: str, bad: Any) -> None:
    # Checked before the pool (here a stand-in no process serves) is used.
    with pytest.raises(ValueError, match=r"^chunk_size must be a positive integer \(or None for about 10 chunks"):
        CHUNK_SIZE_CALLS[call](jobs[call.split("-")[0]], bad)
