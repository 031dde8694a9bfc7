"""jina-embeddings-v3's task adapters in the jobs: the Embedder and bertlite's SentenceTransformer on a
sentence-transformers folder of the original layout (its custom_st.Transformer, mean pooling, Normalize, the task
instructions as prompts), against the float64 reference of test_jina_v3_original.py pooled here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from tests.models.test_jina_v3_original import INSTRUCTIONS, TASKS, folders  # noqa: F401 (the fixture)
from tests.models.test_roberta import unigram_tokenizer

TEXTS = ["the list of items", "sort a dict by value", "json writes a new sequence " * 4, "zebra"]


@pytest.fixture(scope="module")
def st_folder(folders, tmp_path_factory) -> Path:  # noqa: F811 (the fixture imported above)
    """The original layout as jina-embeddings-v3's hub folder: its custom Transformer module, mean pooling,
    Normalize, and config_sentence_transformers.json's prompts (the task instructions)."""
    folder = tmp_path_factory.mktemp("jina-v3-st") / "model"
    shutil.copytree(folders["original"], folder)
    unigram_tokenizer(folder)
    modules = [
        {"idx": 0, "name": "transformer", "path": "", "type": "custom_st.Transformer", "kwargs": ["task"]},
        {"idx": 1, "name": "pooler", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "normalizer", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True})
    )
    (folder / "2_Normalize").mkdir()
    prompts = {"prompts": INSTRUCTIONS, "default_prompt_name": None, "similarity_fn_name": "cosine"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(prompts))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 24, "do_lower_case": False}))
    return folder


def expected_vectors(folder: Path, references: dict, texts: list[str], task: int | None) -> np.ndarray:
    """Normalized mean-pooled vectors of `task`'s float64 reference, on the folder's tokenizer's ids."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=24, return_tensors="pt")
    with torch.no_grad():
        hidden = references[task](**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].double()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).float().numpy()


@pytest.mark.parametrize("unpad", [True, False])
def test_embedder_runs_each_task_adapter(folders, st_folder, unpad) -> None:  # noqa: F811
    embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32", unpad=unpad)
    for task in (None, 0, 3):
        expected = expected_vectors(st_folder, folders["references"], TEXTS, task)
        got = embedder.encode(TEXTS, task=None if task is None else TASKS[task])
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # prompt_name=task adds the task's instruction, as the original's encode does.
    query = [INSTRUCTIONS["retrieval.query"] + text for text in TEXTS]
    expected = expected_vectors(st_folder, folders["references"], query, 0)
    got = embedder.encode(TEXTS, task="retrieval.query", prompt_name="retrieval.query")
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    embedder.default_task = "classification"
    np.testing.assert_allclose(
        embedder.encode(TEXTS), expected_vectors(st_folder, folders["references"], TEXTS, 3), atol=1e-5, rtol=0
    )
    with pytest.raises(ValueError, match=r"^unknown task 'query'; the tasks are retrieval\.query, .*text-matching$"):
        embedder.encode(TEXTS, task="query")


def test_sentence_transformer_takes_task_and_default_task(folders, st_folder) -> None:  # noqa: F811
    # As jina's README loads it: trust_remote_code=True is taken, and bertlite's own code runs.
    model = bertlite.SentenceTransformer(
        str(st_folder), device="cpu", trust_remote_code=True, model_kwargs={"default_task": "text-matching"}
    )
    expected = expected_vectors(st_folder, folders["references"], TEXTS, 4)
    np.testing.assert_allclose(model.encode(TEXTS), expected, atol=1e-5, rtol=0)
    expected = expected_vectors(st_folder, folders["references"], TEXTS, 1)
    np.testing.assert_allclose(model.encode(TEXTS, task="retrieval.passage"), expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        bertlite.SentenceTransformer(str(st_folder), device="cpu", model_kwargs={"default_task": "nope"})


def test_serve_takes_a_task_per_request_on_both_routes(st_folder) -> None:
    """/v1/embeddings and TEI's /embed with a task field; requests of different tasks may share the worker's
    batches, each text keeping its own adapter; an unknown task is a 422 naming the tasks."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from tests.serve_helpers import running

    embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32")
    expected = {task: embedder.encode(TEXTS, task=task) for task in (None, *TASKS)}
    with running(lambda: embedder) as (url, _):

        def openai_route(task: str | None) -> np.ndarray:
            body = {"input": TEXTS} | ({} if task is None else {"task": task})
            data = httpx.post(f"{url}/v1/embeddings", json=body, timeout=60).json()["data"]
            return np.asarray([row["embedding"] for row in data])

        def tei_route(task: str | None) -> np.ndarray:
            body = {"inputs": TEXTS} | ({} if task is None else {"task": task})
            return np.asarray(httpx.post(f"{url}/embed", json=body, timeout=60).json())

        with ThreadPoolExecutor(6) as pool:
            asked = [(route, task) for route in (openai_route, tei_route) for task in (None, *TASKS)]
            answers = list(pool.map(lambda a: a[0](a[1]), asked))
        for (_, task), got in zip(asked, answers, strict=True):
            np.testing.assert_allclose(got, expected[task], atol=1e-5, rtol=0)
        wrong = httpx.post(f"{url}/embed", json={"inputs": TEXTS, "task": "query"})
        prompted = httpx.post(f"{url}/embed", json={"inputs": TEXTS, "task": TASKS[0], "prompt_name": TASKS[0]})
    assert wrong.status_code == 422 and "unknown task 'query'; the tasks are retrieval.query" in wrong.text
    query = embedder.encode(TEXTS, task=TASKS[0], prompt_name=TASKS[0])
    np.testing.assert_allclose(np.asarray(prompted.json()), query, atol=1e-5, rtol=0)


def test_the_task_instructions_are_prompts_without_a_sentence_transformers_folder(folders, tmp_path) -> None:  # noqa: F811
    shutil.copytree(folders["original"], tmp_path / "model")
    unigram_tokenizer(tmp_path / "model")
    embedder = bertlite.Embedder.from_pretrained(tmp_path / "model", dtype="float32")
    assert INSTRUCTIONS.items() <= embedder.prompts.items()
    query = [INSTRUCTIONS["retrieval.query"] + text for text in TEXTS]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "model")
    batch = tokenizer(query, padding=True, truncation=True, max_length=64, return_tensors="pt")  # max positions
    with torch.no_grad():
        hidden = folders["references"][0](**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].double()
    expected = ((hidden * mask).sum(1) / mask.sum(1)).float().numpy()  # mean pooling, not normalized: no ST files
    got = embedder.encode(TEXTS, task="retrieval.query", prompt_name="retrieval.query")
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
