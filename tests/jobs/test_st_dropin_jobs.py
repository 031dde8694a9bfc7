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
import inspect
import io
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentence_transformers
import torch

import bertlite
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.st.base import default_device
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


def run_snippet(source: str, library_import: str, names: dict[str, str], save_dir: Path) -> dict[str, Any]:
    """Run a docs snippet with its import line pointing at `library_import`, the model names replaced by
    folders, SAVE_DIR by `save_dir` (a load from it pinned as the model names are); return its variables
    (stdout is swallowed: the snippets print)."""
    code = textwrap.dedent(source).replace(ST_IMPORT, library_import)
    for name, path in names.items():
        code = code.replace(f'"{name}"', f'"{path}", {PINNED}')
    code = code.replace("Encoder(SAVE_DIR)", f"Encoder({str(save_dir)!r}, {PINNED})")
    code = code.replace("SAVE_DIR", repr(str(save_dir)))
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


def assert_snippet(source: str, names: dict[str, str], outputs: list[str], tmp_path: Path) -> None:
    theirs = run_snippet(source, ST_IMPORT, names, tmp_path / "sentence-transformers")
    ours = run_snippet(source, OURS_IMPORT, names, tmp_path / "bertlite")
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

SPARSE_SIMILARITY_DOCSTRING = """
    from sentence_transformers import SparseEncoder

    model = SparseEncoder("naver/splade-cocondenser-ensembledistil")
    sentences = [
        "The weather is so nice!",
        "It's so sunny outside.",
        "He's driving to the movie theater.",
        "She's going to the cinema.",
    ]
    embeddings = model.encode(sentences)
    dot = model.similarity(embeddings, embeddings)
    name_before = model.similarity_fn_name
    model.similarity_fn_name = "cosine"
    cosine = model.similarity(embeddings, embeddings)

    model.similarity_fn_name = "dot"
    dense = model.encode(sentences, convert_to_sparse_tensor=False)
    pairwise_dot = model.similarity_pairwise(dense[::2], dense[1::2])
    model.similarity_fn_name = "cosine"
    pairwise_cosine = model.similarity_pairwise(dense[::2], dense[1::2])
"""

CROSS_ENCODER_SAVE_LOAD = """
    from sentence_transformers import CrossEncoder

    model = CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2")
    model.max_seq_length = 24
    model.save_pretrained(SAVE_DIR)
    loaded = CrossEncoder(SAVE_DIR)
    scores = loaded.predict([("How many people live in Berlin?", "Berlin is well known for its museums.")])
    max_seq_length = loaded.max_seq_length
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
    "sparse similarity docstring": (
        SPARSE_SIMILARITY_DOCSTRING,
        "splade",
        ["dot", "name_before", "cosine", "pairwise_dot", "pairwise_cosine"],
    ),
    "cross-encoder save and load": (CROSS_ENCODER_SAVE_LOAD, "reranker", ["scores", "max_seq_length"]),
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
def test_docs_snippet_runs_unchanged(snippet: str, folders: dict[str, Path], tmp_path: Path) -> None:
    source, folder, outputs = SNIPPETS[snippet]
    assert_snippet(source, {name: str(folders[folder]) for name in MODEL_NAMES[folder]}, outputs, tmp_path)


# --- the surface: the same methods, arguments and defaults ------------------------------------------

SURFACE = {
    "CrossEncoder": [
        "__init__",
        "tokenize",
        "preprocess",
        "predict",
        "rank",
        "save",
        "save_pretrained",
        "to",
        "get_max_seq_length",
        "start_multi_process_pool",
        "stop_multi_process_pool",
    ],
    "SparseEncoder": [
        "__init__",
        "tokenize",
        "preprocess",
        "encode",
        "encode_query",
        "encode_document",
        "similarity",
        "similarity_pairwise",
        "decode",
        "sparsity",
        "get_embedding_dimension",
        "get_sentence_embedding_dimension",
        "save",
        "save_pretrained",
        "to",
        "get_max_seq_length",
        "start_multi_process_pool",
        "stop_multi_process_pool",
    ],
    "MultiVectorEncoder": [
        "__init__",
        "tokenize",
        "preprocess",
        "encode",
        "encode_query",
        "encode_document",
        "similarity",
        "similarity_pairwise",
        "get_embedding_dimension",
        "save",
        "save_pretrained",
        "to",
        "get_max_seq_length",
        "start_multi_process_pool",
        "stop_multi_process_pool",
    ],
}
PROPERTIES = ["device", "max_seq_length", "similarity_fn_name", "tokenizer"]
_ST_INIT = ["__init__: model_name_or_path has no default", "__init__: no modules", "__init__: no model_card_data"]
_NO_POOL_KWARGS = ["no **kwargs"]
# Where bertlite's signatures differ from sentence-transformers 6's, on purpose (docs/migration.md lists them):
# batch_size=None batches by a token budget (the outputs do not depend on it); **kwargs (forwarded to
# sentence-transformers' modules) has no counterpart; `modules` and `model_card_data` build or describe
# sentence-transformers' module lists; keep_in_fp32_modules is its experimental fp32 override.
KNOWN_DIFFERENCES = {
    "CrossEncoder": {
        *_ST_INIT,
        "__init__: no keep_in_fp32_modules",
        "predict: batch_size default 32 -> None",
        "predict: no **kwargs",
        "rank: batch_size default 32 -> None",
    },
    "SparseEncoder": {*_ST_INIT},
    "MultiVectorEncoder": {
        *_ST_INIT,
        *(
            f"{method}: {what}"
            for method in ("encode", "encode_query", "encode_document")
            for what in (
                "batch_size default 32 -> None",
                "no **kwargs",
            )
        ),
        "similarity: no **kwargs",
        "similarity_pairwise: no **kwargs",
    },
}


def signature_differences(name: str, method: str, theirs: inspect.Signature, ours: inspect.Signature) -> set[str]:
    """What a caller of sentence-transformers' method could pass that bertlite's takes otherwise: a positional
    parameter at another place, a keyword missing or with another default, **kwargs missing."""
    found = set()
    positional = [p.name for p in theirs.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    ours_positional = [p.name for p in ours.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    if ours_positional[: len(positional)] != positional:
        found.add(f"{method}: positional order {ours_positional} != {positional}")
    for parameter in theirs.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            if not any(p.kind is p.VAR_KEYWORD for p in ours.parameters.values()):
                found.add(f"{method}: no **kwargs")
            continue
        if parameter.name not in ours.parameters:
            found.add(f"{method}: no {parameter.name}")
            continue
        default = ours.parameters[parameter.name].default
        if default != parameter.default:
            found.add(
                f"{method}: {parameter.name} "
                + (
                    "has no default"
                    if default is inspect.Parameter.empty
                    else f"default {parameter.default} -> {default}"
                )
            )
    return found


@pytest.mark.parametrize("name", list(SURFACE))
def test_signatures_match_sentence_transformers(name: str) -> None:
    theirs_class, ours_class = getattr(sentence_transformers, name), getattr(bertlite, name)
    found = set()
    for method in SURFACE[name]:
        assert callable(getattr(ours_class, method, None)), f"{name}.{method} is missing"
        found |= signature_differences(
            name,
            method,
            inspect.signature(getattr(theirs_class, method)),
            inspect.signature(getattr(ours_class, method)),
        )
    assert found == KNOWN_DIFFERENCES[name]
    for attribute in PROPERTIES:  # properties (settable ones too) where sentence-transformers has them
        if isinstance(inspect.getattr_static(theirs_class, attribute, None), property):
            assert isinstance(inspect.getattr_static(ours_class, attribute), property), attribute


# --- the constructor, save, to -------------------------------------------------------------------

PAIRS = [("How many people live in Berlin?", "Berlin had a population of 3,520,031 in 2019."), ("a", "b c")]
TEXTS = ["The weather is lovely today.", "It's so sunny outside, isn't it?"]
F32 = {"model_kwargs": {"dtype": torch.float32}}


def outputs(model: Any) -> list[Any]:
    """What a model of either library gives for the inputs above, by its kind."""
    if not hasattr(model, "predict"):
        return [model.encode_query(TEXTS), model.encode_document(TEXTS)]
    if model.num_labels > 1:
        return [model.predict(PAIRS), model.predict(PAIRS, apply_softmax=True)]
    return [model.predict(PAIRS), model.rank(PAIRS[0][0], [d for _, d in PAIRS])]


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("CrossEncoder", "reranker"),
        ("CrossEncoder", "nli"),
        ("SparseEncoder", "splade"),
        ("MultiVectorEncoder", "colbert"),
    ],
)
def test_save_gives_a_folder_sentence_transformers_loads(
    name: str, folder: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    theirs_class, ours_class = getattr(sentence_transformers, name), getattr(bertlite, name)
    expected = outputs(theirs_class(str(folders[folder]), device="cpu"))
    ours = ours_class(str(folders[folder]), **F32)
    assert_same(outputs(ours), expected)
    ours.save(str(tmp_path / "saved"))
    assert_same(outputs(theirs_class(str(tmp_path / "saved"), device="cpu")), expected)
    assert_same(outputs(ours_class(str(tmp_path / "saved"), **F32)), expected)
    ours.save_pretrained(str(tmp_path / "again"))
    assert (tmp_path / "again" / "modules.json").read_bytes() == (tmp_path / "saved" / "modules.json").read_bytes()


def test_cross_encoder_keywords_as_sentence_transformers(folders: dict[str, Path]) -> None:
    path = str(folders["reranker"])
    st = sentence_transformers.CrossEncoder(
        path, device="cpu", max_length=8, activation_fn=torch.nn.Identity(), prompts={"q": "query: "}
    )
    ours = bertlite.CrossEncoder(path, max_length=8, activation_fn=torch.nn.Identity(), prompts={"q": "query: "}, **F32)
    assert ours.max_seq_length == st.max_seq_length == 8
    assert_same(ours.predict(PAIRS, prompt_name="q"), st.predict(PAIRS, prompt_name="q"))
    ours.max_seq_length = 12
    assert ours.max_length == 12


def test_sparse_and_multi_vector_keywords_as_sentence_transformers(folders: dict[str, Path]) -> None:
    splade, colbert = str(folders["splade"]), str(folders["colbert"])
    kwargs = {"similarity_fn_name": "cosine", "max_active_dims": 16, "prompts": {"query": "q: "}}
    st = sentence_transformers.SparseEncoder(splade, device="cpu", **kwargs)
    ours = bertlite.SparseEncoder(splade, **kwargs, **F32)
    assert (ours.similarity_fn_name, ours.max_active_dims, ours.prompts) == (
        st.similarity_fn_name,
        st.max_active_dims,
        st.prompts,
    )
    a, b = ours.encode_query(TEXTS), st.encode_query(TEXTS)
    assert_same(a, b)
    assert_same(ours.similarity(a, a), st.similarity(b, b))
    with pytest.raises(ValueError, match="similarity_fn_name='maxsim' must be one of"):
        ours.similarity_fn_name = "maxsim"
    st_mv = sentence_transformers.MultiVectorEncoder(colbert, device="cpu", truncate_dim=8)
    ours_mv = bertlite.MultiVectorEncoder(colbert, truncate_dim=8, **F32)
    assert ours_mv.get_embedding_dimension() == st_mv.get_embedding_dimension() == 8
    assert_same(ours_mv.encode_document(TEXTS), st_mv.encode_document(TEXTS))


@pytest.mark.parametrize("name", list(SURFACE))
def test_what_bertlite_cannot_do_is_refused_by_name(name: str, folders: dict[str, Path]) -> None:
    cls = getattr(bertlite, name)
    path = str(folders[{"CrossEncoder": "reranker", "SparseEncoder": "splade"}.get(name, "colbert")])
    with pytest.raises(ValueError, match="backend='onnx'"):
        cls(path, backend="onnx")
    model = cls(path, **F32)
    with pytest.raises(ValueError, match="chunk_size applies to a multi-process pool"):
        (model.predict(PAIRS, chunk_size=1) if name == "CrossEncoder" else model.encode(TEXTS, chunk_size=1))
    wrapped = (model.model, model.tokenizer) + ((model.projection,) if name == "MultiVectorEncoder" else ())
    with pytest.raises(TypeError, match="revision load a checkpoint by name"):
        cls(*wrapped, revision="main")
    with pytest.raises(TypeError, match="the folder's tokenizer is loaded"):
        cls(path, model.tokenizer)
    assert cls(*wrapped, device="cpu").device == torch.device("cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SURFACE))
def test_a_pool_of_processes_gives_the_same_outputs(name: str, folders: dict[str, Path]) -> None:
    path = str(folders[{"CrossEncoder": "reranker", "SparseEncoder": "splade"}.get(name, "colbert")])
    model = getattr(bertlite, name)(path, **F32)
    texts = [f"text number {i} of a pool's input" for i in range(9)] + ["a long text " * 100]
    pairs = [(f"query {i}", text) for i, text in enumerate(texts)]
    run = (
        (lambda **kw: model.predict(pairs, **kw))
        if name == "CrossEncoder"
        else (lambda **kw: model.encode(texts, **kw))
    )
    expected = run()
    pool = model.start_multi_process_pool(["cpu", "cpu"])
    try:
        assert_same(run(pool=pool, chunk_size=3), expected, "pool")
        if name == "CrossEncoder":
            pooled, here = model.rank("query 1", texts, pool=pool, chunk_size=4), model.rank("query 1", texts)
            # the same score per document (to the last bits of a batch's shape), in descending order
            scores = {r["corpus_id"]: r["score"] for r in here}
            assert sorted(r["corpus_id"] for r in pooled) == list(range(len(texts)))
            np.testing.assert_allclose(
                [r["score"] for r in pooled], [scores[r["corpus_id"]] for r in pooled], atol=1e-6
            )
            assert all(a["score"] >= b["score"] for a, b in zip(pooled, pooled[1:], strict=False))
            with pytest.raises(ValueError, match="documents\\[1\\] must be a non-empty str"):
                model.rank("q", ["a", ""], pool=pool)
        if name == "SparseEncoder":
            dense = model.encode(texts, convert_to_sparse_tensor=False, convert_to_tensor=False, pool=pool)
            assert_same(dense, model.encode(texts, convert_to_sparse_tensor=False, convert_to_tensor=False), "list")
            with pytest.raises(ValueError, match="longer than max_length"):
                model.encode(texts, pool=pool, on_long="error")  # raised in a process, raised here
    finally:
        model.stop_multi_process_pool(pool)
    assert_same(run(device=["cpu"]), expected, "a pool for one call")


@pytest.mark.parametrize(
    ("name", "bare", "resolved"),
    [
        ("CrossEncoder", "ms-marco-MiniLM-L6-v2", "cross-encoder/ms-marco-MiniLM-L6-v2"),
        ("SparseEncoder", "splade-tiny", "sparse-encoder/splade-tiny"),
        ("MultiVectorEncoder", "colbert-tiny", "colbert-tiny"),
        ("CrossEncoder", "bert-base-uncased", "bert-base-uncased"),
    ],
)
def test_a_bare_name_is_looked_up_where_sentence_transformers_looks(
    name: str, bare: str, resolved: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = getattr(bertlite, name)
    seen = {}

    def load(name_or_path: str, options: LoadOptions) -> Any:
        seen.update(name=name_or_path, device=options.device, dtype=options.dtype, **options.hub_kwargs)
        raise RuntimeError("stop")

    monkeypatch.setattr(cls, "_load", staticmethod(load))
    with pytest.raises(RuntimeError, match="stop"):
        cls(bare, revision="v1", cache_folder="/cache", token="t", local_files_only=True, **F32)
    assert seen == {
        "name": resolved,
        "device": torch.device(default_device()),  # sentence-transformers' rule: the CPU on a machine without GPU
        "revision": "v1",
        "cache_dir": "/cache",
        "token": "t",
        "local_files_only": True,
        "dtype": torch.float32,
    }


def test_to_moves_casts_and_readies_again(folders: dict[str, Path]) -> None:
    model = bertlite.CrossEncoder(str(folders["reranker"]), **F32)
    expected = model.predict(PAIRS)
    assert model.to("cpu") is model
    assert model.to(torch.bfloat16).dtype == torch.bfloat16
    np.testing.assert_allclose(model.predict(PAIRS), expected, atol=2e-2)
    quantized = bertlite.CrossEncoder.from_pretrained(str(folders["reranker"]), dtype="int8")
    with pytest.raises(ValueError, match="int8"):
        quantized.to(torch.float16)
    with pytest.raises(ValueError, match="int8"):
        quantized.save("unused")


@pytest.mark.parametrize(
    ("name", "folder"), [("CrossEncoder", "reranker"), ("SparseEncoder", "splade"), ("MultiVectorEncoder", "colbert")]
)
def test_tokenizer_tokenize_and_preprocess_are_sentence_transformers(
    name: str, folder: str, folders: dict[str, Path]
) -> None:
    theirs = getattr(sentence_transformers, name)(str(folders[folder]), device="cpu")
    ours = getattr(bertlite, name)(str(folders[folder]), **F32)
    texts = ["a first text", "naïve café, 日本語 🙂", "and a longer second one " * 80]
    inputs = PAIRS if name == "CrossEncoder" else texts
    ours_tok, theirs_tok = ours.tokenizer, theirs.tokenizer
    assert type(ours_tok).__name__ == type(theirs_tok).__name__
    assert ours_tok.model_max_length == theirs_tok.model_max_length == ours.max_seq_length
    assert (ours_tok.pad_token, ours_tok.pad_token_id) == (theirs_tok.pad_token, theirs_tok.pad_token_id)
    assert ours_tok.tokenize(texts[1]) == theirs_tok.tokenize(texts[1])
    kwargs = {"padding": True, "truncation": True, "return_tensors": "pt"}
    ours_batch, theirs_batch = ours_tok(texts, **kwargs), theirs_tok(texts, **kwargs)
    assert list(ours_batch) == list(theirs_batch)
    assert all(torch.equal(ours_batch[k], theirs_batch[k]) for k in theirs_batch)
    assert ours_tok.decode(ours_batch["input_ids"][1]) == theirs_tok.decode(theirs_batch["input_ids"][1])
    assert_same(dict(ours.tokenize(inputs)), dict(theirs.tokenize(inputs)), "tokenize")
    assert_same(dict(ours.preprocess(inputs, prompt="p: ")), dict(theirs.preprocess(inputs, prompt="p: ")), "prompt")
    assert ours.preprocess([]) == theirs.preprocess([]) == {}
    ours.max_seq_length = theirs.max_seq_length = 16  # the tokenizer follows, as sentence-transformers' does
    assert ours.tokenizer.model_max_length == theirs.tokenizer.model_max_length == 16
    assert_same(dict(ours.tokenize(inputs)), dict(theirs.tokenize(inputs)), "tokenize at 16")
    # bertlite's own step beside them: the `tokenizers` backend and its unpadded Encodings (the multi-vector
    # job's carry its document marker, so they are not sentence-transformers' plain tokens).
    if name != "MultiVectorEncoder":
        padded = ours.tokenize(inputs)
        rows = zip(padded["input_ids"], padded["attention_mask"], strict=True)
        assert [e.ids for e in ours.encodings(inputs)] == [ids[mask.bool()].tolist() for ids, mask in rows]
    assert type(ours.backend_tokenizer).__module__ == "tokenizers"


def test_a_transformers_tokenizer_wraps_as_its_backend(folders: dict[str, Path]) -> None:
    loaded = bertlite.CrossEncoder(str(folders["reranker"]), **F32)
    wrapped = bertlite.CrossEncoder(loaded.model, loaded.tokenizer)  # transformers' surface, as a user has it
    assert wrapped.backend_tokenizer.to_str() == loaded.backend_tokenizer.to_str()
    np.testing.assert_array_equal(wrapped.predict(PAIRS), loaded.predict(PAIRS))
