"""Prompts and truncate_dim in Embedder and `bertlite embed`: the vectors sentence-transformers
gives for the same prompt_name / prompt / truncate_dim, on the real checkpoint with prompts added."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from bertlite.cli import main
from bertlite.jobs.embedder import Embedder, read_sentence_transformers_prompts
from tests.serve_helpers import (
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    prompts_folder,
)

PROMPTS = {"query": "query: ", "passage": "passage: ", "classification": "Classify the topic: "}


@pytest.fixture(scope="module")
def folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prompts_folder(real_model_path, tmp_path_factory.mktemp("prompts") / "model", PROMPTS, "passage")


@pytest.fixture(scope="module")
def st_model(folder: Path) -> SentenceTransformer:
    return SentenceTransformer(str(folder), device="cpu")


@pytest.fixture(scope="module")
def embedder(folder: Path) -> Embedder:
    return Embedder.from_pretrained(
        folder, dtype="float32"
    )  # fp32 references; dtype="auto" is bf16 on a CPU with native bf16


@pytest.fixture(scope="module")
def texts(corpus_texts: list[str]) -> list[str]:
    # Short texts keep the sentence-transformers runs fast; the prompts still change every vector.
    return [t[:160] for t in corpus_texts[:8]]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # the default prompt (passage)
        {"prompt_name": "document"},  # sentence-transformers' built-in empty prompt
        {"prompt": ""},  # an explicit empty prompt overrides the default
        {"prompt_name": "classification", "truncate_dim": 128},
    ],
)
def test_encode_equals_sentence_transformers(
    kwargs: dict, embedder: Embedder, st_model: SentenceTransformer, texts: list[str]
) -> None:
    expected = st_model.encode(texts, batch_size=8, **kwargs)
    ours = embedder.encode(texts, **kwargs)
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=2e-6, rtol=0)


def test_truncate_dim_in_the_constructor_sets_the_dimension(folder: Path, st_model: SentenceTransformer) -> None:
    truncated = Embedder.from_pretrained(folder, dtype="float32", truncate_dim=32)
    texts = ["a short text", "another one, a little longer than the first"]
    assert truncated.dimension == 32
    expected = SentenceTransformer(str(folder), device="cpu", truncate_dim=32).encode(texts)
    np.testing.assert_allclose(truncated.encode(texts), expected, atol=2e-6, rtol=0)
    # Not re-normalized, as sentence-transformers: a unit vector cut short is shorter.
    assert np.all(np.linalg.norm(truncated.encode(texts), axis=1) < 0.99)
    assert truncated.encode(texts, truncate_dim=8).shape == (2, 8)


def test_prompt_settings_read_from_the_folder(folder: Path, real_model_path: Path) -> None:
    assert read_sentence_transformers_prompts(folder) == ({"query": "query: ", "document": "", **PROMPTS}, "passage")
    assert read_sentence_transformers_prompts(real_model_path) == ({"query": "", "document": ""}, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt_name": "nope"}, "prompt_name='nope' is not one of the prompts (classification, document, passage"),
        ({"prompt": "x", "prompt_name": "query"}, "give prompt or prompt_name, not both"),
        ({"truncate_dim": 0}, "truncate_dim=0 must be between 1 and the dimension 384"),
        ({"truncate_dim": 385}, "truncate_dim=385 must be between 1 and the dimension 384"),
    ],
)
def test_bad_prompt_or_dimension_is_a_clear_error(kwargs: dict, message: str, embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        embedder.encode(["text"], **kwargs)


def test_bad_prompt_config_names_the_file(real_model_path: Path, tmp_path: Path) -> None:
    folder = prompts_folder(real_model_path, tmp_path / "m", {"query": "q: "}, "missing")
    with pytest.raises(ValueError, match="default_prompt_name='missing' is not one of its prompts"):
        Embedder.from_pretrained(folder)


@pytest.mark.slow
def test_embed_cli_prompt_and_truncate_dim_equal_sentence_transformers(
    folder: Path, st_model: SentenceTransformer, texts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    for flags, kwargs, out in [
        (["--prompt-name", "query", "--truncate-dim", "48"], {"prompt_name": "query", "truncate_dim": 48}, "o.npy"),
        (["--prompt", "search: ", "--truncate-dim", "16"], {"prompt": "search: ", "truncate_dim": 16}, "o.jsonl"),
    ]:
        out = tmp_path / out
        argv = ["embed", str(folder), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--quiet", "--dtype", "float32"]
        assert main([*argv, *flags]) == 0
        if out.suffix == ".npy":
            got = np.load(out)
        else:
            got = np.array([json.loads(line)["embedding"] for line in out.read_text().splitlines()])
        np.testing.assert_allclose(got, st_model.encode(texts, **kwargs), atol=2e-6, rtol=0)


def test_embed_cli_unknown_prompt_name_exits_2(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("a\n")
    out = tmp_path / "out.npy"
    assert main(["embed", str(folder), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--prompt-name", "x"]) == 2
    assert "bertlite embed: error: prompt_name='x' is not one of the prompts" in capsys.readouterr().err
    assert not out.exists()


def test_ray_engine_refuses_prompt_flags_before_starting_ray(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("a\n")
    argv = ["embed", str(folder), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out"), "--engine", "ray"]
    assert main([*argv, "--prompt-name", "query", "--truncate-dim", "8"]) == 2
    err = capsys.readouterr().err
    assert "bertlite embed: error: --prompt-name, --truncate-dim: not supported with --engine ray yet" in err
    assert not (tmp_path / "out").exists()
