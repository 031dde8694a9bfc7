"""sentence-transformers code runs unchanged on bertlite's CrossEncoder, SparseEncoder and MultiVectorEncoder.

Each snippet is copied from sentence-transformers' documentation (quickstart, the classes' docstrings, model
cards) and run twice: as written (`from sentence_transformers import ...`), then with only the import line
swapped to bertlite. The model names are replaced by tiny random folders that sentence-transformers saves in
the test, and `model_kwargs={"dtype": torch.float32}` pins the precision (bertlite's dtype="auto" may pick
bfloat16 on some CPUs). The two runs' variables must agree: numbers within 1e-5 (RTOL for large ones),
everything discrete (types, shapes, dtypes, layouts, orders, tokens) identical.
"""

# ruff: noqa: E501 (the snippets' long lines are copied as the docs give them)

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers import COLBERT_OPTIONS, colbert_folder, cross_encoder_folder, masked_lm_folder, splade_folder
from tests.serve_helpers import one_torch_thread  # noqa: F401 (an autouse fixture)

ATOL = 1e-5
# Beyond ~10, float32's spacing exceeds ATOL: a SPLADE dot product of the random model (~3700, a sum over
# the vocabulary) differs between two summation orders by an ulp or two, so large numbers get this relative bound.
RTOL = 1e-6
ST_IMPORT = "from sentence_transformers import"
OURS_IMPORT = "from bertlite import"
PINNED = 'model_kwargs={"dtype": torch.float32}'


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dropin")
    base = masked_lm_folder(real_model_path, root / "mlm")
    return {
        "reranker": cross_encoder_folder(real_model_path, root / "reranker", num_labels=1),
        "nli": cross_encoder_folder(real_model_path, root / "nli", num_labels=3, seed=1),
        "splade": splade_folder(base, root / "splade", prompts={"query": "", "document": ""}),
        "colbert": colbert_folder(real_model_path, root / "colbert", **COLBERT_OPTIONS),
    }


def run_snippet(source: str, library_import: str, names: dict[str, str]) -> dict[str, Any]:
    """Run a docs snippet with its import line pointing at `library_import`, the model names replaced by
    folders; return its variables (stdout is swallowed: the snippets print)."""
    code = textwrap.dedent(source).replace(ST_IMPORT, library_import)
    for name, path in names.items():
        code = code.replace(f'"{name}"', f'"{path}", {PINNED}')
    namespace: dict[str, Any] = {"torch": torch}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<snippet>", "exec"), namespace)
    return namespace


def assert_same(ours: Any, theirs: Any, where: str = "") -> None:
    """Numbers within ATOL, everything else identical: types, shapes, dtypes, sparse layout, order."""
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} != {type(theirs).__name__}"
    if isinstance(theirs, torch.Tensor):
        assert (ours.layout, ours.dtype, ours.shape, ours.device) == (
            theirs.layout,
            theirs.dtype,
            theirs.shape,
            theirs.device,
        ), where
        torch.testing.assert_close(ours.to_dense(), theirs.to_dense(), atol=ATOL, rtol=RTOL, msg=where)
    elif isinstance(theirs, np.ndarray | np.generic):
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), where
        if theirs.dtype.kind in "fc":
            np.testing.assert_allclose(ours, theirs, atol=ATOL, rtol=RTOL, err_msg=where)
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(theirs, float):
        assert abs(ours - theirs) <= ATOL + RTOL * abs(theirs), f"{where}: {ours} != {theirs}"
    elif isinstance(theirs, list | tuple):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


def assert_snippet(source: str, names: dict[str, str], outputs: list[str]) -> None:
    theirs = run_snippet(source, ST_IMPORT, names)
    ours = run_snippet(source, OURS_IMPORT, names)
    assert type(ours["model"]).__module__.startswith("bertlite.")  # the swapped import took
    for output in outputs:
        assert_same(ours[output], theirs[output], output)


# --- the snippets, as the docs give them -------------------------------------------------------------

CROSS_ENCODER_QUICKSTART = """
    from sentence_transformers import CrossEncoder

    # 1. Load a pre-trained CrossEncoder model
    model = CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2")

    # We want to compute the similarity between the query sentence...
    query = "A man is eating pasta."

    # ... and all sentences in the corpus
    corpus = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
        "A man is riding a horse.",
        "A woman is playing violin.",
        "Two men pushed carts through the woods.",
        "A man is riding a white horse on an enclosed ground.",
        "A monkey is playing drums.",
        "A cheetah is running behind its prey.",
    ]

    # 2. We rank all sentences in the corpus for the query
    ranks = model.rank(query, corpus)

    # Print the scores
    print("Query: ", query)
    for rank in ranks:
        print(f"{rank['score']:.2f}\\t{corpus[rank['corpus_id']]}")

    # 3. Alternatively, you can also manually compute the score between two sentences
    import numpy as np

    sentence_combinations = [[query, sentence] for sentence in corpus]
    scores = model.predict(sentence_combinations)

    # Sort the scores in decreasing order to get the corpus indices
    ranked_indices = np.argsort(scores)[::-1]
    print("Scores: ", scores)
    print("Indices:", ranked_indices)
"""

CROSS_ENCODER_DOCSTRING = """
    from sentence_transformers import CrossEncoder

    # Load a pre-trained CrossEncoder model
    model = CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2")

    # Predict scores for sentence pairs
    pairs = [
        ("How many people live in Berlin?", "Berlin had a population of 3,520,031 in 2019."),
        ("How many people live in Berlin?", "Berlin is well known for its museums."),
    ]
    scores = model.predict(pairs)
    print(scores)

    # Rank documents by relevance to a query
    results = model.rank(
        "How many people live in Berlin?",
        ["Berlin had a population of 3,520,031 in 2019.", "Berlin is well known for its museums."],
    )
    print(results)
"""

CROSS_ENCODER_RANK = """
    from sentence_transformers import CrossEncoder
    model = CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2")

    query = "Who wrote 'To Kill a Mockingbird'?"
    documents = [
        "'To Kill a Mockingbird' is a novel by Harper Lee published in 1960. It was immediately successful, winning the Pulitzer Prize, and has become a classic of modern American literature.",
        "The novel 'Moby-Dick' was written by Herman Melville and first published in 1851. It is considered a masterpiece of American literature and deals with complex themes of obsession, revenge, and the conflict between good and evil.",
        "Harper Lee, an American novelist widely known for her novel 'To Kill a Mockingbird', was born in 1926 in Monroeville, Alabama. She received the Pulitzer Prize for Fiction in 1961.",
        "Jane Austen was an English novelist known primarily for her six major novels, which interpret, critique and comment upon the British landed gentry at the end of the 18th century.",
        "The 'Harry Potter' series, which consists of seven fantasy novels written by British author J.K. Rowling, is among the most popular and critically acclaimed books of the modern era.",
        "'The Great Gatsby', a novel written by American author F. Scott Fitzgerald, was published in 1925. The story is set in the Jazz Age and follows the life of millionaire Jay Gatsby and his pursuit of Daisy Buchanan."
    ]

    ranked = model.rank(query, documents, return_documents=True)
    top_two = model.rank(query, documents, top_k=2, batch_size=4, show_progress_bar=False)
"""

CROSS_ENCODER_PREDICT_OPTIONS = """
    from sentence_transformers import CrossEncoder

    model = CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2", max_length=16)
    sentences = [["I love cats", "Cats are amazing"], ["I prefer dogs", "Dogs are loyal"]]
    as_numpy = model.predict(sentences)
    as_tensor = model.predict(sentences, convert_to_tensor=True)
    as_list = model.predict(sentences, convert_to_numpy=False)
    one = model.predict(sentences[0])
    small_batches = model.predict(sentences, batch_size=1, show_progress_bar=False)
    empty = model.predict([])
    max_seq_length = model.max_seq_length
"""

CROSS_ENCODER_NLI = """
    from sentence_transformers import CrossEncoder

    model = CrossEncoder("cross-encoder/nli-deberta-v3-base")
    scores = model.predict([
        ("A man is eating pizza", "A man eats something"),
        ("A black race car starts up in front of a crowd of people.", "A man is driving down a lonely road."),
    ])

    # Convert scores to labels
    label_mapping = ["contradiction", "entailment", "neutral"]
    labels = [label_mapping[score_max] for score_max in scores.argmax(axis=1)]
    probabilities = model.predict(
        [("A man is eating pizza", "A man eats something")], apply_softmax=True, convert_to_tensor=True
    )
"""

SPARSE_QUICKSTART = """
    from sentence_transformers import SparseEncoder

    # 1. Load a pretrained SparseEncoder model
    model = SparseEncoder("naver/splade-cocondenser-ensembledistil")

    # The sentences to encode
    sentences = [
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
    ]

    # 2. Calculate sparse embeddings by calling model.encode()
    embeddings = model.encode(sentences)
    print(embeddings.shape)
    # [3, 30522] - sparse representation with vocabulary size dimensions

    # 3. Calculate the embedding similarities
    similarities = model.similarity(embeddings, embeddings)
    print(similarities)

    # 4. Check sparsity stats
    stats = SparseEncoder.sparsity(embeddings)
    print(f"Sparsity: {stats['sparsity_ratio']:.2%}")
    shape = tuple(embeddings.shape)
"""

SPARSE_DECODE = """
    from sentence_transformers import SparseEncoder

    model = SparseEncoder("naver/splade-cocondenser-ensembledistil")
    sentences = [
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
    ]
    embeddings = model.encode(sentences)

    decoded = model.decode(embeddings, top_k=10)
    for decoded_sentence, sentence in zip(decoded, sentences):
        print(f"Sentence: {sentence}")
        print(f"Decoded: {decoded_sentence}")
        print()
    one = model.decode(embeddings[0], top_k=5)
"""

SPARSE_QUERY_DOCUMENT = """
    from sentence_transformers import SparseEncoder

    model = SparseEncoder("naver/splade-v3")

    queries = ["what causes aging fast"]
    documents = [
        "UV-A light, specifically, is what mainly causes tanning, skin aging, and cataracts, UV-B causes sunburn, skin aging and skin cancer, and UV-C is the strongest, and therefore most effective at killing microorganisms. Again  s",
        "Answers from Ronald Petersen, M.D. Yes, Alzheimer's disease usually worsens slowly. But its speed of progression varies, depending on a person's genetic makeup, environmental factors, age at diagnosis and other medical conditions. Still anyone diagnosed with Alzheimer's whose symptoms seem to be progressing quickly — or who experiences a sudden decline — should see his or her doctor.",
        "Bell's palsy and Extreme tiredness and Extreme fatigue (2 causes) Bell's palsy and Extreme tiredness and Hepatitis (2 causes) Bell's palsy and Extreme tiredness and Liver pain (2 causes) Bell's palsy and Extreme tiredness and Lymph node swelling in children (2 causes)",
    ]
    query_embeddings = model.encode_query(queries)
    document_embeddings = model.encode_document(documents)
    print(query_embeddings.shape, document_embeddings.shape)

    # Get the similarity scores for the embeddings
    similarities = model.similarity(query_embeddings, document_embeddings)
    print(similarities)

    dense = model.encode_document(documents, convert_to_sparse_tensor=False)
    pairwise = model.similarity_pairwise(dense, dense)
    one_query = model.encode_query(queries[0], max_active_dims=8)
    dimension = model.get_embedding_dimension()
"""

MULTI_VECTOR_QUERY_DOCUMENT = """
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder("lightonai/GTE-ModernColBERT-v1")

    queries = ["What is the capital of France?", "Who wrote Hamlet?"]
    documents = ["Paris is the capital and largest city of France.", "Hamlet is a tragedy by William Shakespeare."]
    query_embeddings = model.encode_query(queries)
    document_embeddings = model.encode_document(documents)
    scores = model.similarity(query_embeddings, document_embeddings)
    pairwise = model.similarity_pairwise(query_embeddings, document_embeddings)
    dimension = model.get_embedding_dimension()
"""

SNIPPETS = {
    "cross-encoder quickstart": (CROSS_ENCODER_QUICKSTART, "reranker", ["ranks", "scores", "ranked_indices"]),
    "cross-encoder docstring": (CROSS_ENCODER_DOCSTRING, "reranker", ["scores", "results"]),
    "cross-encoder rank": (CROSS_ENCODER_RANK, "reranker", ["ranked", "top_two"]),
    "cross-encoder predict options": (
        CROSS_ENCODER_PREDICT_OPTIONS,
        "reranker",
        ["as_numpy", "as_tensor", "as_list", "one", "small_batches", "empty", "max_seq_length"],
    ),
    "cross-encoder nli": (CROSS_ENCODER_NLI, "nli", ["scores", "labels", "probabilities"]),
    "sparse quickstart": (SPARSE_QUICKSTART, "splade", ["embeddings", "similarities", "stats", "shape"]),
    "sparse decode": (SPARSE_DECODE, "splade", ["decoded", "one"]),
    "sparse query-document": (
        SPARSE_QUERY_DOCUMENT,
        "splade",
        ["query_embeddings", "document_embeddings", "similarities", "pairwise", "one_query", "dimension"],
    ),
    "multi-vector query-document": (
        MULTI_VECTOR_QUERY_DOCUMENT,
        "colbert",
        ["query_embeddings", "document_embeddings", "scores", "pairwise", "dimension"],
    ),
}
MODEL_NAMES = {
    "reranker": ["cross-encoder/ms-marco-MiniLM-L6-v2"],
    "nli": ["cross-encoder/nli-deberta-v3-base"],
    "splade": ["naver/splade-cocondenser-ensembledistil", "naver/splade-v3"],
    "colbert": ["lightonai/GTE-ModernColBERT-v1"],
}


@pytest.mark.parametrize("snippet", list(SNIPPETS))
def test_docs_snippet_runs_unchanged(snippet: str, folders: dict[str, Path]) -> None:
    source, folder, outputs = SNIPPETS[snippet]
    assert_snippet(source, {name: str(folders[folder]) for name in MODEL_NAMES[folder]}, outputs)
