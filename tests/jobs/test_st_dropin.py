# ruff: noqa: E501 (the documentation snippets keep their long lines as written)
"""sentence-transformers code runs unchanged on bertlite.SentenceTransformer and bertlite.util.

The constructor's mapping (bertlite.jobs.st.base, bertlite.jobs.st.names) is checked against sentence-transformers' own rules.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentence_transformers
import torch
from sentence_transformers import util as st_util
from sentence_transformers.util.misc import ORIGINAL_TRANSFORMER_MODELS as ST_ORIGINAL_MODELS

import bertlite
import bertlite.util
from bertlite.jobs.st.base import st_load_kwargs
from bertlite.jobs.st.names import CROSS_ENCODER_ORGANIZATION, ORIGINAL_TRANSFORMER_MODELS, resolve_model_name

# --- the constructor's name and keywords (st.names, st.base) ----------------------------


def test_original_transformer_models_are_sentence_transformers_list() -> None:
    assert ORIGINAL_TRANSFORMER_MODELS == set(ST_ORIGINAL_MODELS)


@pytest.mark.parametrize(
    ("name", "organization", "expected"),
    [
        ("all-MiniLM-L6-v2", "sentence-transformers", "sentence-transformers/all-MiniLM-L6-v2"),
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers", "sentence-transformers/all-MiniLM-L6-v2"),
        ("BAAI/bge-small-en-v1.5", "sentence-transformers", "BAAI/bge-small-en-v1.5"),
        ("bert-base-uncased", "sentence-transformers", "bert-base-uncased"),
        ("BERT-base-uncased", "sentence-transformers", "BERT-base-uncased"),
        ("ms-marco-MiniLM-L6-v2", CROSS_ENCODER_ORGANIZATION, "cross-encoder/ms-marco-MiniLM-L6-v2"),
        ("colbert-tiny", None, "colbert-tiny"),
    ],
)
def test_resolve_model_name(name: str, organization: str | None, expected: str) -> None:
    assert resolve_model_name(name, organization) == expected


def test_resolve_model_name_keeps_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model").mkdir()
    assert resolve_model_name("my-model") == "my-model"
    assert resolve_model_name(tmp_path / "my-model") == str(tmp_path / "my-model")


def test_resolve_model_name_refuses_a_file_and_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        resolve_model_name(tmp_path / "model.bin")
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_model_name("models/of/mine")


def test_st_load_kwargs_maps_the_hub_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENTENCE_TRANSFORMERS_HOME", raising=False)
    assert st_load_kwargs() == {
        "device": None,
        "revision": None,
        "cache_dir": None,
        "local_files_only": False,
        "token": None,
    }
    kwargs = st_load_kwargs(
        device="cpu", cache_folder="/c", revision="v1", local_files_only=True, token="t",
        model_kwargs={"torch_dtype": torch.bfloat16},
    )  # fmt: skip
    assert kwargs == {
        "device": "cpu",
        "revision": "v1",
        "cache_dir": "/c",
        "local_files_only": True,
        "token": "t",
        "dtype": torch.bfloat16,
    }
    assert st_load_kwargs(model_kwargs={"dtype": "float32"})["dtype"] == "float32"
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", "/st-home")
    assert st_load_kwargs()["cache_dir"] == "/st-home"
    assert st_load_kwargs(cache_folder="/mine")["cache_dir"] == "/mine"


def test_st_load_kwargs_device_map_names_the_device() -> None:
    assert st_load_kwargs(device="cpu", model_kwargs={"device_map": "cuda:1"})["device"] == "cuda:1"
    with pytest.raises(ValueError, match="runs a model on one device"):
        st_load_kwargs(model_kwargs={"device_map": "auto"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trust_remote_code": True}, "bertlite runs no code from a checkpoint"),
        ({"backend": "onnx"}, "runs on torch only"),
        ({"use_kernels": True}, "chooses its own kernels"),
        ({"processor_kwargs": {"model_max_length": 8}}, "takes no processor_kwargs"),
        ({"config_kwargs": {"hidden_dropout_prob": 0.0}}, "takes no config_kwargs"),
        ({"model_kwargs": {"attn_implementation": "flex_attention"}}, "attn_implementation='flex_attention'"),
        ({"model_kwargs": {"offload_folder": "x"}}, "'offload_folder'"),
        ({"model_kwargs": {"dtype": "float32", "torch_dtype": "float32"}}, "both 'dtype' and 'torch_dtype'"),
    ],
)
def test_st_load_kwargs_refuses_what_bertlite_lacks(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        st_load_kwargs(**kwargs)


# --- sentence-transformers' documentation snippets, run twice ---------------------------------------------
#
# Each snippet is copied from sentence-transformers' documentation (its README, docs/sentence_transformer/usage,
# examples/sentence_transformer/applications) and run as written, then with only the import lines swapped to
# bertlite (ST_IMPORTS). The model names become the bundled all-MiniLM-L6-v2 folder, with
# model_kwargs={"dtype": torch.float32} pinned (bertlite's dtype="auto" may pick bfloat16 on some CPUs); other
# edits are named in EDITS. The two runs' variables must agree: numbers within ATOL, everything discrete
# (types, shapes, dtypes, orders, ids, binary codes) identical; int8 / uint8 codes see the note at
# assert_same.

ATOL = 1e-5
PADDING_ATOL = 1e-3  # rows of padding in encode(output_value=None): see test_every_output_as_...
ST_IMPORTS = {
    "from sentence_transformers import": "from bertlite import",
    "from sentence_transformers.util import": "from bertlite.util import",
    "from sentence_transformers.quantization import": "from bertlite.util import",
}
MODEL_NAMES = (
    "sentence-transformers/all-MiniLM-L6-v2",
    "all-MiniLM-L6-v2",
    "mixedbread-ai/mxbai-embed-large-v1",
    "intfloat/multilingual-e5-large",
    "nomic-ai/nomic-embed-text-v1.5",
)

SNIPPETS = {
    # README.md / docs/sentence_transformer/usage/usage.rst
    "quickstart": """
        from sentence_transformers import SentenceTransformer

        # 1. Load a pretrained Sentence Transformer model
        model = SentenceTransformer("all-MiniLM-L6-v2")

        # The sentences to encode
        sentences = [
            "The weather is lovely today.",
            "It's so sunny outside!",
            "He drove to the stadium.",
        ]

        # 2. Calculate embeddings by calling model.encode()
        embeddings = model.encode(sentences)
        print(embeddings.shape)
        # [3, 384]

        # 3. Calculate the embedding similarities
        similarities = model.similarity(embeddings, embeddings)
        print(similarities)
    """,
    # docs/sentence_transformer/usage/semantic_textual_similarity.rst
    "sts_two_lists": """
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer("all-MiniLM-L6-v2")

        # Two lists of sentences
        sentences1 = [
            "The new movie is awesome",
            "The cat sits outside",
            "A man is playing guitar",
        ]

        sentences2 = [
            "The dog plays in the garden",
            "The new movie is so great",
            "A woman watches TV",
        ]

        # Compute embeddings for both lists
        embeddings1 = model.encode(sentences1)
        embeddings2 = model.encode(sentences2)

        # Compute cosine similarities
        similarities = model.similarity(embeddings1, embeddings2)

        # Output the pairs with their score
        for idx_i, sentence1 in enumerate(sentences1):
            print(sentence1)
            for idx_j, sentence2 in enumerate(sentences2):
                print(f" - {sentence2: <30}: {similarities[idx_i][idx_j]:.4f}")
    """,
    "similarity_fn_at_init": """
        from sentence_transformers import SentenceTransformer, SimilarityFunction

        model = SentenceTransformer("all-MiniLM-L6-v2", similarity_fn_name=SimilarityFunction.DOT_PRODUCT)
        embeddings = model.encode(["The weather is lovely today.", "It's so sunny outside!"])
        similarities = model.similarity(embeddings, embeddings)
        name = model.similarity_fn_name
    """,
    "similarity_fn_manhattan": """
        from sentence_transformers import SentenceTransformer, SimilarityFunction

        # Load a pretrained Sentence Transformer model
        model = SentenceTransformer("all-MiniLM-L6-v2")

        # Embed some sentences
        sentences = [
            "The weather is lovely today.",
            "It's so sunny outside!",
            "He drove to the stadium.",
        ]
        embeddings = model.encode(sentences)

        similarities = model.similarity(embeddings, embeddings)
        print(similarities)

        # Change the similarity function to Manhattan distance
        model.similarity_fn_name = SimilarityFunction.MANHATTAN
        print(model.similarity_fn_name)
        # => "manhattan"

        similarities_manhattan = model.similarity(embeddings, embeddings)
        print(similarities_manhattan)
    """,
    # examples/sentence_transformer/applications/semantic-search/semantic_search.py
    "semantic_search_topk": """
        import torch

        from sentence_transformers import SentenceTransformer

        embedder = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")

        # Corpus with example documents
        corpus = [
            "Machine learning is a field of study that gives computers the ability to learn without being explicitly programmed.",
            "Deep learning is part of a broader family of machine learning methods based on artificial neural networks with representation learning.",
            "Neural networks are computing systems vaguely inspired by the biological neural networks that constitute animal brains.",
            "Mars rovers are robotic vehicles designed to travel on the surface of Mars to collect data and perform experiments.",
            "The James Webb Space Telescope is the largest optical telescope in space, designed to conduct infrared astronomy.",
            "SpaceX's Starship is designed to be a fully reusable transportation system capable of carrying humans to Mars and beyond.",
            "Global warming is the long-term heating of Earth's climate system observed since the pre-industrial period due to human activities.",
            "Renewable energy sources include solar, wind, hydro, and geothermal power that naturally replenish over time.",
            "Carbon capture technologies aim to collect CO2 emissions before they enter the atmosphere and store them underground.",
        ]
        # Use "convert_to_tensor=True" to keep the tensors on GPU (if available)
        corpus_embeddings = embedder.encode_document(corpus, convert_to_tensor=True)

        # Query sentences:
        queries = [
            "How do artificial neural networks work?",
            "What technology is used for modern space exploration?",
            "How can we address climate change challenges?",
        ]

        # Find the closest 5 sentences of the corpus for each query sentence based on cosine similarity
        top_k = min(5, len(corpus))
        found = []
        for query in queries:
            query_embedding = embedder.encode_query(query, convert_to_tensor=True)

            # We use cosine-similarity and torch.topk to find the highest 5 scores
            similarity_scores = embedder.similarity(query_embedding, corpus_embeddings)[0]
            scores, indices = torch.topk(similarity_scores, k=top_k)

            print("\\nQuery:", query)
            print("Top 5 most similar sentences in corpus:")

            for score, idx in zip(scores, indices):
                print(f"(Score: {score:.4f})", corpus[idx])
            found.append((scores, indices))
    """,
    # the same file's alternative, in its docstring
    "semantic_search_util": """
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.util import semantic_search

        embedder = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
        corpus = [
            "Machine learning is a field of study that gives computers the ability to learn without being explicitly programmed.",
            "Mars rovers are robotic vehicles designed to travel on the surface of Mars to collect data and perform experiments.",
            "Renewable energy sources include solar, wind, hydro, and geothermal power that naturally replenish over time.",
            "Neural networks are computing systems vaguely inspired by the biological neural networks that constitute animal brains.",
        ]
        corpus_embeddings = embedder.encode_document(corpus, convert_to_tensor=True)
        query_embedding = embedder.encode_query("How do artificial neural networks work?", convert_to_tensor=True)
        hits = semantic_search(query_embedding, corpus_embeddings, top_k=5)
        hits = hits[0]      #Get the hits for the first query
        for hit in hits:
            print(corpus[hit['corpus_id']], "(Score: {:.4f})".format(hit['score']))
    """,
    # docs/sentence_transformer/usage/ paraphrase mining
    "paraphrase_mining": """
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.util import paraphrase_mining

        model = SentenceTransformer("all-MiniLM-L6-v2")

        # Single list of sentences - Possible tens of thousands of sentences
        sentences = [
            "The cat sits outside",
            "A man is playing guitar",
            "I love pasta",
            "The new movie is awesome",
            "The cat plays in the garden",
            "A woman watches TV",
            "The new movie is so great",
            "Do you like pizza?",
        ]

        paraphrases = paraphrase_mining(model, sentences)

        for paraphrase in paraphrases[0:10]:
            score, i, j = paraphrase
            print("{} \\t\\t {} \\t\\t Score: {:.4f}".format(sentences[i], sentences[j], score))
    """,
    # examples/sentence_transformer/applications/embedding-quantization/README.md
    "quantization_binary": """
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.quantization import quantize_embeddings

        # 1. Load an embedding model
        model = SentenceTransformer("mixedbread-ai/mxbai-embed-large-v1")

        # 2a. Encode some text using "binary" quantization
        binary_embeddings = model.encode(
            ["I am driving to the lake.", "It is a beautiful day."],
            precision="binary",
        )

        # 2b. or, encode some text without quantization & apply quantization afterwards
        embeddings = model.encode(["I am driving to the lake.", "It is a beautiful day."])
        binary_embeddings_after = quantize_embeddings(embeddings, precision="binary")
    """,
    "quantization_int8_calibrated": """
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.quantization import quantize_embeddings

        # 1. Load an embedding model
        model = SentenceTransformer("mixedbread-ai/mxbai-embed-large-v1")

        # 2. Prepare an example calibration dataset
        corpus = CALIBRATION_TEXTS
        calibration_embeddings = model.encode(corpus)

        # 3. Encode some text without quantization & apply quantization afterwards
        embeddings = model.encode(["I am driving to the lake.", "It is a beautiful day."])
        int8_embeddings = quantize_embeddings(
            embeddings,
            precision="int8",
            calibration_embeddings=calibration_embeddings,
        )
    """,
    # examples/sentence_transformer/applications/computing-embeddings/README.rst: prompts
    "prompts": """
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(
            "intfloat/multilingual-e5-large",
            prompts={
                "classification": "Classify the following text: ",
                "retrieval": "Retrieve semantically similar text: ",
                "clustering": "Identify the topic or theme based on the text: ",
            },
            default_prompt_name="retrieval",
        )
        embeddings_prompt = model.encode("How to bake a strawberry cake", prompt="Retrieve semantically similar text: ")
        embeddings_name = model.encode("How to bake a strawberry cake", prompt_name="retrieval")
        embeddings_default = model.encode("How to bake a strawberry cake")
    """,
    "prompts_set_later": """
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer("intfloat/multilingual-e5-large")
        model.prompts = {
            "classification": "Classify the following text: ",
            "retrieval": "Retrieve semantically similar text: ",
            "clustering": "Identify the topic or theme based on the text: ",
        }
        model.default_prompt_name="retrieval"
        embeddings = model.encode("How to bake a strawberry cake")
        plain = model.encode("How to bake a strawberry cake", prompt="")
    """,
    "max_seq_length": """
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer("all-MiniLM-L6-v2")
        print("Max Sequence Length:", model.max_seq_length)
        # => Max Sequence Length: 256
        before = model.max_seq_length

        # Change the length to 200
        model.max_seq_length = 200

        print("Max Sequence Length:", model.max_seq_length)
        # => Max Sequence Length: 200
        after = model.max_seq_length
        embeddings = model.encode(["word " * 300])
    """,
    # examples/sentence_transformer/training/matryoshka/README.md (Inference)
    "matryoshka_truncate_dim": """
        from sentence_transformers import SentenceTransformer
        import torch.nn.functional as F

        matryoshka_dim = 64
        model = SentenceTransformer(
            "nomic-ai/nomic-embed-text-v1.5",
            trust_remote_code=True,
            truncate_dim=matryoshka_dim,
        )

        embeddings = model.encode(
            [
                "search_query: What is TSNE?",
                "search_document: t-distributed stochastic neighbor embedding (t-SNE) is a statistical method for visualizing high-dimensional data by giving each datapoint a location in a two or three-dimensional map.",
                "search_document: Amelia Mary Earhart was an American aviation pioneer and writer.",
            ]
        )
        assert embeddings.shape[-1] == matryoshka_dim

        similarities = model.similarity(embeddings[0], embeddings[1:])
        dimension = model.get_sentence_embedding_dimension()
    """,
    # the classic README (sentence-transformers 2.x), still in use: util.cos_sim on tensors
    "util_cos_sim": """
        from sentence_transformers import SentenceTransformer, util

        model = SentenceTransformer("all-MiniLM-L6-v2")

        # Two lists of sentences
        sentences1 = ["The cat sits outside", "A man is playing guitar", "The new movie is awesome"]
        sentences2 = ["The dog plays in the garden", "A woman watches TV", "The new movie is so great"]

        # Compute embedding for both lists
        embeddings1 = model.encode(sentences1, convert_to_tensor=True)
        embeddings2 = model.encode(sentences2, convert_to_tensor=True)

        # Compute cosine-similarities
        cosine_scores = util.cos_sim(embeddings1, embeddings2)

        # Output the pairs with their score
        for i in range(len(sentences1)):
            print("{} \\t\\t {} \\t\\t Score: {:.4f}".format(sentences1[i], sentences2[i], cosine_scores[i][i]))
    """,
    # multi-qa model cards: dot_score search
    "util_dot_score": """
        from sentence_transformers import SentenceTransformer, util

        query = "How many people live in London?"
        docs = ["Around 9 Million people live in London", "London is known for its financial district"]

        #Load the model
        model = SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')

        #Encode query and documents
        query_emb = model.encode(query)
        doc_emb = model.encode(docs)

        #Compute dot score between query and all document embeddings
        scores = util.dot_score(query_emb, doc_emb)[0].cpu().tolist()

        #Combine docs & scores
        doc_score_pairs = list(zip(docs, scores))

        #Sort by decreasing score
        doc_score_pairs = sorted(doc_score_pairs, key=lambda x: x[1], reverse=True)

        #Output passages & scores
        for doc, score in doc_score_pairs:
            print(score, doc)
    """,
    # model cards of the sentence-transformers models ("Usage (Sentence-Transformers)")
    "model_card_usage": """
        from sentence_transformers import SentenceTransformer
        sentences = ["This is an example sentence", "Each sentence is converted"]

        model = SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')
        embeddings = model.encode(sentences)
        print(embeddings)
    """,
    # sentence-transformers' retrieve & re-rank demo: one query as a tensor, then semantic_search
    "retrieve_single_query": """
        from sentence_transformers import SentenceTransformer, util

        bi_encoder = SentenceTransformer("multi-qa-MiniLM-L6-cos-v1")
        passages = ["Berlin has 3.5 million inhabitants.", "Paris is in France.", "Berlin is the capital of Germany."]
        corpus_embeddings = bi_encoder.encode(passages, convert_to_tensor=True, show_progress_bar=True)
        question_embedding = bi_encoder.encode("How many people live in Berlin?", convert_to_tensor=True)
        hits = util.semantic_search(question_embedding, corpus_embeddings, top_k=32)
        hits = hits[0]  # Get the hits for the first query
    """,
    # encode's options, as the API reference describes them
    "encode_options": """
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer("all-MiniLM-L6-v2")
        sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
        as_tensor = model.encode(sentences, convert_to_tensor=True)
        as_list = model.encode(sentences, convert_to_numpy=False)
        normalized = model.encode(sentences, normalize_embeddings=True, batch_size=2)
        truncated = model.encode(sentences, truncate_dim=128)
        one = model.encode("The weather is lovely today.")
        none = model.encode([])
        token_embeddings = model.encode(sentences, output_value="token_embeddings")
        ubinary = model.encode(sentences, precision="ubinary")
        pairwise = model.similarity_pairwise(as_tensor, as_tensor.flip(0))
        dimension = model.get_sentence_embedding_dimension()
    """,
    # save and load back (docs/sentence_transformer/training_overview.md: "model.save_pretrained(...)")
    "save_and_reload": """
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer("all-MiniLM-L6-v2")
        model.save_pretrained(SAVE_PATH)
        reloaded = SentenceTransformer(SAVE_PATH)
        embeddings = reloaded.encode(["The weather is lovely today.", "He drove to the stadium."])
        max_seq_length = reloaded.max_seq_length
    """,
    # examples/sentence_transformer/applications/computing-embeddings/README.rst: multi-process
    "multi_process_pool": """
        from sentence_transformers import SentenceTransformer

        def main():
            model = SentenceTransformer("all-MiniLM-L6-v2")
            # Start a multi-process pool with multiple GPUs
            pool = model.start_multi_process_pool(target_devices=["cpu", "cpu"])
            # Encode with multiple GPUs
            embeddings = model.encode(inputs, pool=pool)
            # Don't forget to stop the pool after usage
            model.stop_multi_process_pool(pool)
            return embeddings

        inputs = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
        embeddings = main()
    """,
}
# Edits beyond the import lines and model names: the sources need the hub or another model for these.
EDITS = {
    "quantization_int8_calibrated": 'load_dataset("nq_open", split="train[:1000]")["question"] -> 200 texts of tests/data',
    "matryoshka_truncate_dim": "trust_remote_code=True dropped (nomic-embed needs its code; the bundled BERT does not)",
}


def prepared(source: str, library: str, model_path: Path, save_path: Path) -> str:
    """The snippet's code with its imports pointing at `library` and the model names at the bundled folder."""
    code = textwrap.dedent(source).replace("trust_remote_code=True,", "")
    if library == "bertlite":
        for theirs, ours in ST_IMPORTS.items():
            code = code.replace(theirs, ours)
    for name in (*MODEL_NAMES, "multi-qa-MiniLM-L6-cos-v1"):
        for quote in "\"'":
            code = code.replace(
                f"{quote}{name}{quote}", f'{quote}{model_path}{quote}, model_kwargs={{"dtype": torch.float32}}'
            )
    pinned = f'{str(save_path)!r}, model_kwargs={{"dtype": torch.float32}}'
    return code.replace("SentenceTransformer(SAVE_PATH)", f"SentenceTransformer({pinned})").replace(
        "SAVE_PATH", repr(str(save_path))
    )


def run_snippet(code: str, texts: list[str]) -> dict[str, Any]:
    """Run code; its variables (stdout swallowed: the snippets print)."""
    namespace: dict[str, Any] = {"torch": torch, "CALIBRATION_TEXTS": texts}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 (the docs' own code)
    return namespace


def assert_same(theirs: Any, ours: Any, where: str, exact_codes: bool = False) -> None:
    """Equal outputs: the same types, shapes and dtypes; floats within ATOL; discrete values identical.

    int8 / uint8 codes of a model's vectors are floor((x - min) / step) of float32 vectors that agree to ~1e-7,
    so a value on a bucket's edge may land one bucket over: such codes may differ by 1, in at most 1% of the
    values, unless exact_codes (the same floats quantized: identical codes).
    """
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} != {type(theirs).__name__}"
    if isinstance(theirs, np.ndarray):
        assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype), where
        if theirs.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL, err_msg=where)
        elif theirs.dtype in (np.int8, np.uint8) and "binary" not in where and not exact_codes:
            off = np.abs(ours.astype(np.int32) - theirs.astype(np.int32))
            assert off.max(initial=0) <= 1 and (off > 0).sum() <= 0.01 * off.size, f"{where}: codes differ"
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(theirs, torch.Tensor):
        assert (ours.shape, ours.dtype, ours.device) == (theirs.shape, theirs.dtype, theirs.device), where
        torch.testing.assert_close(ours, theirs, rtol=0, atol=ATOL, msg=where)
    elif isinstance(theirs, list | tuple):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            assert_same(a, b, f"{where}[{i}]", exact_codes)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(theirs[key], ours[key], f"{where}[{key!r}]", exact_codes)
    elif isinstance(theirs, float):
        assert abs(ours - theirs) <= ATOL, f"{where}: {ours} != {theirs}"
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


def outputs(namespace: dict[str, Any]) -> dict[str, Any]:
    """The snippet's results: its variables, less modules, functions, classes and the models themselves."""
    return {
        name: value
        for name, value in namespace.items()
        if not name.startswith("__")
        and name not in ("torch", "CALIBRATION_TEXTS")
        and not isinstance(value, types.ModuleType | types.FunctionType | type)
        and not type(value).__module__.startswith(("sentence_transformers", "bertlite"))
    }


@pytest.fixture(scope="module")
def calibration_texts(corpus_texts: list[str]) -> list[str]:
    return corpus_texts[:200]


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_docs_snippet_gives_sentence_transformers_outputs(
    name: str, real_model_path: Path, calibration_texts: list[str], tmp_path: Path
) -> None:
    theirs = run_snippet(
        prepared(SNIPPETS[name], "sentence_transformers", real_model_path, tmp_path / "st"), calibration_texts
    )
    ours = run_snippet(prepared(SNIPPETS[name], "bertlite", real_model_path, tmp_path / "bertlite"), calibration_texts)
    expected = outputs(theirs)
    assert expected, "the snippet left no outputs to compare"
    assert sorted(outputs(ours)) == sorted(expected)
    for variable, value in expected.items():
        assert_same(value, ours[variable], f"{name}: {variable}")


# --- bertlite.util against sentence_transformers.util ------------------------------------------------------


@pytest.fixture(scope="module")
def vectors() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(40, 24, generator=generator)
    b = torch.randn(70, 24, generator=generator)
    b[10] = b[3]  # equal scores: the order of ties must match too
    return a, b


@pytest.mark.parametrize(
    "name",
    [
        "cos_sim",
        "dot_score",
        "euclidean_sim",
        "manhattan_sim",
        "pairwise_cos_sim",
        "pairwise_dot_score",
        "pairwise_euclidean_sim",
        "pairwise_manhattan_sim",
    ],
)
def test_similarity_functions_equal_sentence_transformers(name: str, vectors: tuple) -> None:
    a, b = vectors
    if name.startswith("pairwise"):
        b = b[: len(a)]
    ours, theirs = getattr(bertlite.util, name), getattr(st_util, name)
    for x, y in [(a, b), (a.numpy(), b.numpy()), (list(a), list(b)), (a[0], b), (a.bfloat16(), b.bfloat16())]:
        if name.startswith("pairwise") and getattr(x, "ndim", 2) == 1:
            continue
        assert_same(theirs(x, y), ours(x, y), name)
    if name in ("cos_sim", "dot_score", "pairwise_cos_sim", "pairwise_dot_score"):
        assert_same(theirs(a.to_sparse(), b.to_sparse()), ours(a.to_sparse(), b.to_sparse()), f"{name} sparse")


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"top_k": 3}, {"top_k": 100}, {"query_chunk_size": 7, "corpus_chunk_size": 11, "top_k": 5}],
)
def test_semantic_search_equals_sentence_transformers(kwargs: dict, vectors: tuple) -> None:
    a, b = vectors
    assert_same(st_util.semantic_search(a, b, **kwargs), bertlite.util.semantic_search(a, b, **kwargs), "hits")
    for score_function in (st_util.dot_score, bertlite.util.dot_score):
        assert_same(
            st_util.semantic_search(a[0], b, score_function=st_util.dot_score, **kwargs),
            bertlite.util.semantic_search(a[0], b, score_function=score_function, **kwargs),
            "dot hits",
        )


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"top_k": 2}, {"max_pairs": 10}, {"query_chunk_size": 9, "corpus_chunk_size": 13, "top_k": 4}],
)
def test_paraphrase_mining_embeddings_equals_sentence_transformers(kwargs: dict, vectors: tuple) -> None:
    _, b = vectors
    assert_same(
        st_util.paraphrase_mining_embeddings(b, **kwargs),
        bertlite.util.paraphrase_mining_embeddings(b, **kwargs),
        "pairs",
    )


@pytest.mark.parametrize("precision", ["float32", "int8", "uint8", "binary", "ubinary"])
def test_quantize_embeddings_equals_sentence_transformers(precision: str, vectors: tuple) -> None:
    a, b = vectors
    ranges = np.vstack([b.numpy().min(0), b.numpy().max(0)])
    quantize, theirs = bertlite.util.quantize_embeddings, st_util.quantize_embeddings
    cases = [
        ((a,), {}),
        ((a.numpy(),), {}),
        ((list(a.numpy()),), {}),
        ((a.numpy(),), {"ranges": ranges}),
        ((a.numpy(),), {"calibration_embeddings": b.numpy()}),
        ((a.bfloat16(),), {}),
        (([a[:5], a[5:12]],), {}),  # multi-vector: one calibration for all the matrices
        ((a.numpy()[:0],), {}),
    ]
    for args, kwargs in cases:
        expected = theirs(*args, precision=precision, **kwargs)
        assert_same(expected, quantize(*args, precision=precision, **kwargs), f"{precision} {kwargs}", exact_codes=True)


def test_quantize_embeddings_refuses_what_sentence_transformers_refuses(vectors: tuple) -> None:
    a, _ = vectors
    with pytest.raises(ValueError, match="single embedding"):
        bertlite.util.quantize_embeddings(a[:1].numpy(), precision="int8")
    with pytest.raises(ValueError, match="precision='int4' is not one of"):
        bertlite.util.quantize_embeddings(a.numpy(), precision="int4")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be float"):
        bertlite.util.quantize_embeddings(a.numpy().astype(np.int8), precision="int8")


def test_paraphrase_mining_takes_either_library_s_model(real_model_path: Path) -> None:
    sentences = ["The cat sits outside", "A man is playing guitar", "The cat plays in the garden", "I love pasta"]
    theirs_model = sentence_transformers.SentenceTransformer(
        str(real_model_path), device="cpu", model_kwargs={"dtype": torch.float32}
    )
    ours_model = bertlite.Embedder.from_pretrained(real_model_path, dtype="float32")
    expected = st_util.paraphrase_mining(theirs_model, sentences, prompt="x ", prompt_name="query")
    assert_same(
        expected, bertlite.util.paraphrase_mining(ours_model, sentences, prompt="x ", prompt_name="query"), "ours"
    )
    assert_same(expected, bertlite.util.paraphrase_mining(theirs_model, sentences, prompt="x "), "theirs")


# --- the public surface, by inspect.signature -------------------------------------------------------------

# What differs from sentence-transformers 6, name by name (docs/migration.md lists the same).
SIGNATURE_DIFFERENCES = {
    # bertlite's own keywords, keyword-only, after sentence-transformers' own
    "encode": "+max_tokens, +on_long",
    "encode_query": "+max_tokens, +on_long",
    "encode_document": "+max_tokens, +on_long",
}
SENTENCE_TRANSFORMER_MEMBERS = [
    "__init__",
    "encode",
    "encode_query",
    "encode_document",
    "similarity",
    "similarity_pairwise",
    "get_sentence_embedding_dimension",
    "get_embedding_dimension",
    "get_max_seq_length",
    "save",
    "save_pretrained",
    "to",
    "tokenize",
    "start_multi_process_pool",
    "stop_multi_process_pool",
    "preprocess",
]
UTIL_FUNCTIONS = [
    "cos_sim",
    "dot_score",
    "euclidean_sim",
    "manhattan_sim",
    "pairwise_cos_sim",
    "pairwise_dot_score",
    "pairwise_euclidean_sim",
    "pairwise_manhattan_sim",
    "normalize_embeddings",
    "truncate_embeddings",
    "semantic_search",
    "paraphrase_mining",
    "paraphrase_mining_embeddings",
    "quantize_embeddings",
]
NOT_IMPLEMENTED = ["encode_multi_process"]  # deprecated there


def parameters(function: Any) -> list[tuple[str, Any, str]]:
    return [(p.name, p.default, p.kind.name) for p in inspect.signature(function).parameters.values()]


def describe(ours: list, theirs: list) -> str:
    """The parameters of ours that sentence-transformers' lacks, as "+name" (or ours whole, when reordered)."""
    if ours[: len(theirs) - 1] == theirs[:-1] and theirs[-1][2] == "VAR_KEYWORD" and ours[-1] == theirs[-1]:
        return ", ".join(f"+{name}" for name, _, _ in ours[len(theirs) - 1 : -1])
    return ", ".join(name for name, _, _ in ours if name != "self")


@pytest.mark.parametrize("name", SENTENCE_TRANSFORMER_MEMBERS)
def test_sentence_transformer_signatures(name: str) -> None:
    ours = parameters(getattr(bertlite.SentenceTransformer, name))
    theirs = parameters(getattr(sentence_transformers.SentenceTransformer, name))
    if name in SIGNATURE_DIFFERENCES:
        assert ours != theirs
        assert describe(ours, theirs) == SIGNATURE_DIFFERENCES[name]
    else:
        assert ours == theirs


@pytest.mark.parametrize("name", UTIL_FUNCTIONS)
def test_util_signatures(name: str) -> None:
    ours = [(n, d) for n, d, _ in parameters(getattr(bertlite.util, name))]
    theirs = [(n, d) for n, d, _ in parameters(getattr(st_util, name))]
    # The score_function defaults are each library's own cos_sim.
    assert [(n, d.__name__ if callable(d) else d) for n, d in ours] == [
        (n, d.__name__ if callable(d) else d) for n, d in theirs
    ]


def test_members_not_implemented_are_the_listed_ones() -> None:
    public = {n for n in dir(sentence_transformers.SentenceTransformer) if not n.startswith("_")}
    assert all(n in public for n in NOT_IMPLEMENTED)
    assert not any(hasattr(bertlite.SentenceTransformer, n) for n in NOT_IMPLEMENTED)


# --- SentenceTransformer's own behaviour -----------------------------------------------------------------


@pytest.fixture(scope="module")
def st_model(real_model_path: Path) -> bertlite.SentenceTransformer:
    return bertlite.SentenceTransformer(str(real_model_path), model_kwargs={"dtype": torch.float32}, device="cpu")


def test_sentence_transformer_is_an_embedder(st_model: bertlite.SentenceTransformer, real_model_path: Path) -> None:
    assert isinstance(st_model, bertlite.Embedder)
    assert (st_model.device.type, st_model.dtype) == ("cpu", torch.float32)
    assert (st_model.max_seq_length, st_model.pooling, st_model.normalize) == (256, ["mean"], True)
    plain = bertlite.Embedder.from_pretrained(real_model_path, dtype="float32")
    assert type(plain) is bertlite.Embedder
    assert type(bertlite.SentenceTransformer.from_pretrained(real_model_path, dtype="float32")) is (
        bertlite.SentenceTransformer
    )
    texts = ["a first text", "and a second one"]
    np.testing.assert_allclose(st_model.encode(texts), plain.encode(texts), rtol=0, atol=1e-6)


def test_tokenizer_and_tokenize_are_sentence_transformers(
    st_model: bertlite.SentenceTransformer, real_model_path: Path
) -> None:
    import sentence_transformers

    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), device="cpu")
    texts = ["a first text", "naïve café, 日本語 🙂", "and a longer second one " * 80]
    ours_tok, theirs_tok = st_model.tokenizer, theirs.tokenizer
    assert ours_tok.model_max_length == theirs_tok.model_max_length == 256
    assert ours_tok.tokenize(texts[1]) == theirs_tok.tokenize(texts[1])
    assert ours_tok.decode(ours_tok("hello world")["input_ids"]) == theirs_tok.decode(
        theirs_tok("hello world")["input_ids"]
    )
    kwargs = {"padding": True, "truncation": True, "return_tensors": "pt"}
    ours_batch, theirs_batch = ours_tok(texts, **kwargs), theirs_tok(texts, **kwargs)
    assert list(ours_batch) == list(theirs_batch)
    assert all(torch.equal(ours_batch[k], theirs_batch[k]) for k in theirs_batch)
    ours_inputs, theirs_inputs = st_model.tokenize(texts), theirs.tokenize(texts)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(ours_inputs[key], theirs_inputs[key])
    st_model.max_seq_length = 64  # the tokenizer follows, as sentence-transformers' does
    theirs.max_seq_length = 64
    try:
        assert st_model.tokenizer.model_max_length == theirs.tokenizer.model_max_length == 64
        assert torch.equal(st_model.tokenize(texts)["input_ids"], theirs.tokenize(texts)["input_ids"])
    finally:
        st_model.max_seq_length = 256
    plain = bertlite.Embedder.from_pretrained(real_model_path, dtype="float32")
    assert type(plain.tokenizer).__module__ == "tokenizers" and plain.tokenize(texts)[0].ids  # bertlite's own


def test_embedder_has_the_prompt_rules_of_encode_query_and_document(real_model_path: Path) -> None:
    embedder = bertlite.Embedder.from_pretrained(
        real_model_path, dtype="float32", prompts={"query": "q: ", "passage": "p: ", "other": "o: "}
    )
    texts = ["what is bertlite"]
    np.testing.assert_array_equal(embedder.encode_query(texts), embedder.encode(texts, prompt="q: "))
    # "document" is an empty prompt the folder has (sentence-transformers' default), and it comes first
    np.testing.assert_array_equal(embedder.encode_document(texts), embedder.encode(texts))
    np.testing.assert_array_equal(
        embedder.encode_query(texts, prompt_name="other"), embedder.encode(texts, prompt="o: ")
    )


def test_similarity_fn_name_is_saved_and_read(st_model: bertlite.SentenceTransformer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="only supports similarity_fn_name in"):
        st_model.similarity_fn_name = "maxsim"
    st_model.similarity_fn_name = bertlite.SimilarityFunction.DOT_PRODUCT
    try:
        st_model.save(str(tmp_path / "saved"))
    finally:
        st_model.similarity_fn_name = None
    assert st_model.similarity_fn_name == "cosine"
    assert bertlite.Embedder.from_pretrained(tmp_path / "saved", dtype="float32").similarity_fn_name == "dot"
    theirs = sentence_transformers.SentenceTransformer(str(tmp_path / "saved"), device="cpu")
    assert theirs.similarity_fn_name == "dot"


def test_to_moves_and_casts(real_model_path: Path) -> None:
    model = bertlite.SentenceTransformer(str(real_model_path), model_kwargs={"dtype": "float32"}, device="cpu")
    texts = ["The weather is lovely today.", "He drove to the stadium."]
    expected = model.encode(texts)
    assert model.to(torch.bfloat16) is model and model.dtype == torch.bfloat16
    assert np.abs(model.encode(texts) - expected).max() < 2e-2
    np.testing.assert_allclose(model.encode(texts, device="cpu"), model.encode(texts), rtol=0, atol=0)
    model.to("cpu", torch.float32)  # the bfloat16-rounded weights, in float32 again
    assert model.dtype == torch.float32 and np.abs(model.encode(texts) - expected).max() < 2e-2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output_value": "tokens"}, "'sentence_embedding', 'token_embeddings' or None"),
        ({"precision": "int4"}, "Precision 'int4' is not supported"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"processing_kwargs": {"text": {"padding": True}}}, r"processing_kwargs\['text'\]\['padding'\]=True"),
        ({"normalize": True}, "additional keyword arguments that this model does not use"),
    ],
)
def test_encode_refuses_what_it_cannot_do(st_model: bertlite.SentenceTransformer, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        st_model.encode(["text"], **kwargs)


def test_constructor_refuses_what_it_cannot_do(real_model_path: Path) -> None:
    with pytest.raises(ValueError, match="give model_name_or_path"):
        bertlite.SentenceTransformer()
    with pytest.raises(ValueError, match="building one from modules= is not supported"):
        bertlite.SentenceTransformer(str(real_model_path), modules=[])
    with pytest.raises(ValueError, match="backend='onnx'"):
        bertlite.SentenceTransformer(str(real_model_path), backend="onnx")


def test_save_refuses_the_pooler_mode(real_model_path: Path, tmp_path: Path) -> None:
    embedder = bertlite.Embedder.from_pretrained(real_model_path, dtype="float32", pooling="pooler")
    with pytest.raises(ValueError, match="no sentence-transformers Pooling mode"):
        embedder.save(str(tmp_path))


def test_a_pool_of_processes_gives_the_same_vectors(st_model: bertlite.SentenceTransformer) -> None:
    texts = [f"text number {i} of a pool's input" for i in range(23)] + ["a long text " * 100]
    expected = st_model.encode(texts)
    pool = st_model.start_multi_process_pool(["cpu", "cpu"])
    try:
        np.testing.assert_allclose(st_model.encode(texts, pool=pool, chunk_size=5), expected, rtol=0, atol=1e-6)
        tokens = st_model.encode(texts[:3], pool=pool, output_value="token_embeddings")
        assert_same(st_model.encode(texts[:3], output_value="token_embeddings"), tokens, "token_embeddings")
        with pytest.raises(ValueError, match="longer than max_length=256 tokens"):
            st_model.encode(texts, pool=pool, on_long="error")  # raised in a process, raised here
        assert st_model.encode([], pool=pool).shape == (0,)
    finally:
        st_model.stop_multi_process_pool(pool)
    one = st_model.encode(texts[0], device=["cpu"], convert_to_tensor=True)  # a pool for this call only
    torch.testing.assert_close(one, torch.from_numpy(expected[0]), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "args",
    [
        (["hello world", "a longer text here, and more"],),
        (["hello world", "a longer text here, and more"], "query: "),
        ([("a question", "an answer to it")],),
        (["word " * 400],),
    ],
)
def test_preprocess_gives_sentence_transformers_features(
    args: tuple, st_model: bertlite.SentenceTransformer, real_model_path: Path
) -> None:
    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), device="cpu")
    ours = st_model.preprocess(*args)
    assert isinstance(ours, bertlite.BatchEncoding)  # transformers' BatchEncoding there: a dict as well
    assert_same(dict(theirs.preprocess(*args)), dict(ours), "features")


@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 2}, {"prompt": "query: "}, {"truncate_dim": 8, "batch_size": 3}])
def test_every_output_as_sentence_transformers_gives_it(
    kwargs: dict[str, Any], st_model: bertlite.SentenceTransformer, real_model_path: Path
) -> None:
    theirs_model = sentence_transformers.SentenceTransformer(str(real_model_path), device="cpu")
    # Ties in length and a pair: the batches, and so each text's padded width, follow sentence-transformers' order.
    texts = ["one two", "three", "a much longer text than the others, with words", ("pair a", "pair b"), "x", "y z"]
    theirs = theirs_model.encode(texts, output_value=None, **kwargs)
    ours = st_model.encode(texts, output_value=None, **kwargs)
    assert any(not row["attention_mask"].all() for row in theirs)  # some rows of padding to compare
    # A padding row is no text's output, and its numbers depend on the kernels far more than a text's (the [PAD]
    # embedding's LayerNorms amplify rounding): transformers' own eager and sdpa attention differ there by ~2e-5,
    # against ~3e-6 on the texts' rows, and bertlite's oneDNN GEMMs by up to ~1.2e-4; so PADDING_ATOL there.
    assert len(ours) == len(theirs)
    for i, (got, expected) in enumerate(zip(ours, theirs, strict=True)):
        real = expected["attention_mask"].bool()
        tokens = got.pop("token_embeddings"), expected.pop("token_embeddings")
        assert_same(expected, got, f"text {i}")  # ids, mask, types, modality, prompt_length, sentence_embedding
        assert tokens[0].shape == tokens[1].shape and tokens[0].dtype == tokens[1].dtype
        torch.testing.assert_close(tokens[0][real], tokens[1][real], rtol=0, atol=ATOL)
        torch.testing.assert_close(tokens[0][~real], tokens[1][~real], rtol=0, atol=PADDING_ATOL)
    single = st_model.encode("three", output_value=None)
    assert_same(theirs_model.encode("three", output_value=None), single, "one string")
    assert st_model.encode([], output_value=None) == theirs_model.encode([], output_value=None) == []


def test_every_output_refuses_what_it_cannot_combine(st_model: bertlite.SentenceTransformer) -> None:
    with pytest.raises(ValueError, match="precision='int8' quantizes vectors; output_value=None"):
        st_model.encode(["a", "b"], output_value=None, precision="int8")
    with pytest.raises(ValueError, match="output_value=None runs in this process"):
        st_model.encode(["a", "b"], output_value=None, device=["cpu", "cpu"])
