"""`bertlite serve` over real HTTP on 127.0.0.1: the openai client and httpx get the vectors
Embedder.encode gives; every limit and error with its status and message; API key; metrics."""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer

from bertlite.errors import SlowDtypeWarning
from bertlite.jobs.embedder import Embedder
from bertlite.serve.app import MAX_BODY_BYTES, Limits, create_app
from tests.serve_helpers import (
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    overflowing_model_folder,
    prompts_folder,
    running,
    tiny_model_folder,
)

KEY = "sk-test-key"
PROMPTS = {"query": "query: ", "passage": "passage: "}


@pytest.fixture(scope="module")
def real_folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prompts_folder(real_model_path, tmp_path_factory.mktemp("serve") / "model", PROMPTS)


@pytest.fixture(scope="module")
def real_embedder(real_folder: Path) -> Embedder:
    # float32: compared with sentence-transformers, and bf16 vectors move with the batch they run in (~1e-3)
    return Embedder.from_pretrained(real_folder, dtype="float32")


@pytest.fixture(scope="module")
def real_server(real_embedder: Embedder) -> Iterator[str]:
    with running(lambda: real_embedder, model_name="minilm", api_key=KEY) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(real_server: str) -> openai.OpenAI:
    # max_retries=0: the client would otherwise retry 429 and 5xx answers.
    return openai.OpenAI(base_url=f"{real_server}/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def texts(corpus_texts: list[str]) -> list[str]:
    # Varied lengths, one far over the 256-token max length (auto-truncated, as Embedder.encode does).
    return [corpus_texts[0][:40], corpus_texts[1], " ".join(corpus_texts[2:12]), corpus_texts[13][:200], ""]


def tokens(embedder: Embedder, texts: list[str]) -> int:
    return sum(len(e.ids) for e in embedder.tokenize(texts))


def max_diff(a: object, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float32) - b).max())


@pytest.mark.slow
def test_openai_client_float_base64_and_default(
    client: openai.OpenAI, real_embedder: Embedder, texts: list[str]
) -> None:
    expected = real_embedder.encode(texts)
    floats = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    assert [d.index for d in floats.data] == list(range(len(texts)))
    assert max_diff([d.embedding for d in floats.data], expected) <= 1e-6
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == tokens(real_embedder, texts)
    assert floats.model == "minilm"

    encoded = client.embeddings.create(model="minilm", input=texts, encoding_format="base64")
    decoded = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in encoded.data]
    # The same float32 values as the float response (its JSON holds them exactly); the server runs
    # attention per sequence, encode() on a padded grid, which differ in the last bits.
    assert max_diff(decoded, np.asarray([d.embedding for d in floats.data], dtype=np.float32)) == 0.0
    assert max_diff(decoded, expected) <= 1e-6

    # Without encoding_format the client asks for base64 and decodes it itself.
    default = client.embeddings.create(model="minilm", input=texts[1])
    assert len(default.data) == 1
    assert max_diff(default.data[0].embedding, expected[1]) <= 1e-6


@pytest.mark.slow
def test_dimensions_equal_sentence_transformers_truncate_dim(
    client: openai.OpenAI, real_server: str, real_folder: Path, texts: list[str]
) -> None:
    st = SentenceTransformer(str(real_folder), device="cpu")
    expected = st.encode(texts, truncate_dim=64, normalize_embeddings=True)
    got = client.embeddings.create(model="minilm", input=texts, dimensions=64, encoding_format="float")
    assert max_diff([d.embedding for d in got.data], expected) <= 1e-6
    tei = httpx.post(f"{real_server}/embed", json={"inputs": texts, "dimensions": 64}, headers=auth(), timeout=60)
    assert max_diff(tei.json(), expected) <= 1e-6


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.slow
def test_tei_embed_and_prompts_on_both_endpoints(
    client: openai.OpenAI, real_server: str, real_embedder: Embedder, texts: list[str]
) -> None:
    plain = httpx.post(f"{real_server}/embed", json={"inputs": texts[0]}, headers=auth(), timeout=60)
    assert plain.status_code == 200
    assert max_diff(plain.json(), real_embedder.encode(texts[:1])) <= 1e-6

    expected = real_embedder.encode(texts, prompt_name="query")
    assert max_diff(expected, real_embedder.encode(texts)) > 1e-3  # the prompt changes the vectors
    tei = httpx.post(f"{real_server}/embed", json={"inputs": texts, "prompt_name": "query"}, headers=auth())
    assert max_diff(tei.json(), expected) <= 1e-6
    oa = client.embeddings.create(
        model="minilm", input=texts, encoding_format="float", extra_body={"prompt_name": "query"}
    )
    assert max_diff([d.embedding for d in oa.data], expected) <= 1e-6
    assert oa.usage.prompt_tokens == tokens(real_embedder, ["query: " + t for t in texts])
    custom = client.embeddings.create(model="m", input=texts, encoding_format="float", extra_body={"prompt": "q: "})
    assert max_diff([d.embedding for d in custom.data], real_embedder.encode(texts, prompt="q: ")) <= 1e-6


@pytest.mark.slow
def test_api_key_guards_every_endpoint_but_health(real_server: str) -> None:
    for method, path in [("POST", "/v1/embeddings"), ("POST", "/embed"), ("GET", "/info"), ("GET", "/metrics")]:
        missing = httpx.request(method, f"{real_server}{path}", json={"input": "x", "inputs": "x"})
        assert missing.status_code == 401, path
        wrong = httpx.request(method, f"{real_server}{path}", json={"input": "x"}, headers=auth("sk-wrong"))
        assert wrong.status_code == 401, path
    assert missing.json()["error"]["message"] == "missing API key: send 'Authorization: Bearer <key>'"
    assert wrong.json()["error"] == {
        "message": "invalid API key",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_api_key",
    }
    with pytest.raises(openai.AuthenticationError, match="invalid API key"):
        openai.OpenAI(base_url=f"{real_server}/v1", api_key="sk-wrong", max_retries=0).embeddings.create(
            model="m", input="x"
        )
    assert httpx.get(f"{real_server}/health").json() == {"status": "ok"}


def test_info_and_metrics(client: openai.OpenAI, real_server: str) -> None:
    client.embeddings.create(model="minilm", input=["one", "two"])
    assert httpx.post(f"{real_server}/embed", json={"inputs": "x"}).status_code == 401
    info = httpx.get(f"{real_server}/info", headers=auth()).json()
    assert (info["model"], info["dimension"], info["max_input_length"], info["dtype"]) == (
        "minilm",
        384,
        256,
        "float32",
    )
    assert info["limits"]["max_client_batch_size"] == 32
    assert info["prompts"]["query"] == "query: "
    metrics = httpx.get(f"{real_server}/metrics", headers=auth()).text
    assert 'bertlite_requests_total{endpoint="/v1/embeddings",status="200"}' in metrics
    assert 'bertlite_requests_total{endpoint="/embed",status="401"}' in metrics
    for name in ("bertlite_queue_depth", "bertlite_batch_tokens_bucket", "bertlite_request_duration_seconds_bucket"):
        assert name in metrics


# --- limits and errors, on a tiny model ----------------------------------------------


@pytest.fixture(scope="module")
def tiny_folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_folder(real_model_path, tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tiny_embedder(tiny_folder: Path) -> Embedder:
    return Embedder.from_pretrained(tiny_folder, normalize=True)


@pytest.fixture(scope="module")
def strict_server(tiny_embedder: Embedder) -> Iterator[str]:
    limits = Limits(max_client_batch_size=4, max_input_length=16, auto_truncate=False)
    with running(lambda: tiny_embedder, limits) as (url, _):
        yield url


LONG = "the quick brown fox jumps over the lazy dog and runs far away into the deep dark woods"


def token_count(real_model_path: Path, text: str) -> int:
    tokenizer = Tokenizer.from_file(str(real_model_path / "tokenizer.json"))
    tokenizer.no_truncation()  # the packaged file truncates and pads to 128
    tokenizer.no_padding()
    return len(tokenizer.encode(text).ids)


OPENAI_ERRORS = [
    (b"{not json", 422, None, "the body is not valid JSON: "),
    (b"[1, 2]", 422, None, "the body must be a JSON object, got a list"),
    ({"model": "m"}, 422, "input", "input: required (a string, a list of strings, or token ids)"),
    ({"input": 5}, 422, "input", "input: must be a string or a list of strings, got a number"),
    ({"input": []}, 422, "input", "input: must not be an empty list"),
    (
        {"input": ["a", [101, 102]]},
        422,
        "input",
        "input[1]: token ids go in a list of ints (or a list of such lists), not mixed with text",
    ),
    ({"input": ["a", None]}, 422, "input", "input[1]: must be a string, got null"),
    ({"input": ["a", "b\ud800c"]}, 422, "input", "input[1] holds a lone surrogate (\\ud800), which is not Unicode"),
    ({"input": "a", "encoding_format": "int8"}, 422, "encoding_format", "encoding_format: 'int8' is not one of float"),
    ({"input": "a", "dimensions": 0}, 422, "dimensions", "dimensions: must be a positive integer, got 0"),
    ({"input": "a", "dimensions": "8"}, 422, "dimensions", 'dimensions: must be a positive integer, got "8"'),
    ({"input": "a", "dimensions": 33}, 422, "dimensions", "dimensions: 33 is more than the model's 32"),
    ({"input": "a", "dimension": 8}, 422, "dimension", "dimension: unknown field (known: input, model,"),
    ({"input": "a", "model": 3}, 422, "model", "model: must be a string, got a number"),
    ({"input": "a", "prompt_name": "nope"}, 422, "prompt_name", "prompt_name='nope' is not one of the prompts"),
    ({"input": ["a"] * 5}, 413, "input", "5 inputs in one request, over --max-client-batch-size 4"),
    (b" " * (MAX_BODY_BYTES + 1), 413, None, f"the body is over --max-body-bytes {MAX_BODY_BYTES}"),
    (b"[" * 100_000, 422, None, "the body is not valid JSON: it is nested too deeply"),
    (b'{"input": "a", "dimensions": ' + b"7" * 5000 + b"}", 422, None, "the body is not valid JSON: a number in it"),
    (b'{"input": "a", "\\ud800": 1}', 422, "\ud800", "\ud800: unknown field (known: input, model,"),
]


@pytest.mark.parametrize(("body", "status", "param", "message"), OPENAI_ERRORS)
def test_openai_errors_name_the_field(strict_server: str, body: object, status: int, param: str, message: str) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{strict_server}/v1/embeddings", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status
    error = r.json()["error"]
    assert error["message"].startswith(message), error["message"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/embeddings", 405), ("POST", "/v1/nope", 404), ("GET", "/embed", 405), ("GET", "/nope", 404)],
)
def test_unknown_routes_and_methods_answer_in_the_apis_shape(
    strict_server: str, method: str, path: str, status: int
) -> None:
    r = httpx.request(method, f"{strict_server}{path}")
    assert r.status_code == status
    message = f"{method} {path}: {'Not Found' if status == 404 else 'Method Not Allowed'}"
    if path.startswith("/v1/"):
        code = "not_found" if status == 404 else "method_not_allowed"
        assert r.json() == {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    else:
        assert r.json() == {"error": message, "error_type": "Validation"}
    if status == 405:
        assert r.headers["allow"] == "POST"


def test_an_input_over_max_input_bytes_is_413_naming_it(tiny_embedder: Embedder) -> None:
    with running(lambda: tiny_embedder, Limits(max_input_bytes=64)) as (url, _):
        r = httpx.post(f"{url}/v1/embeddings", json={"input": ["short", "\u00e9" * 40]})  # 2 bytes each
        assert r.status_code == 413
        assert r.json()["error"] == {
            "message": "input 1 is 80 bytes (UTF-8), over --max-input-bytes 64",
            "type": "invalid_request_error",
            "param": "input",
            "code": "input_too_large",
        }
        tei = httpx.post(f"{url}/embed", json={"inputs": "a" * 65})
        assert tei.status_code == 413
        assert tei.json() == {
            "error": "input 0 is 65 bytes (UTF-8), over --max-input-bytes 64",
            "error_type": "Validation",
        }
        assert httpx.post(f"{url}/embed", json={"inputs": "a" * 64}).status_code == 200


def test_the_servers_key_is_stripped_as_the_clients_and_never_empty(tiny_embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="the API key is empty"):
        create_app(lambda: tiny_embedder, api_key=" \n")
    with running(lambda: tiny_embedder, api_key="sk-from-a-file\n") as (url, _):
        r = httpx.post(f"{url}/embed", json={"inputs": "a"}, headers=auth("sk-from-a-file"))
        assert r.status_code == 200


def test_too_long_input_is_413_with_its_index_and_token_count(strict_server: str, real_model_path: Path) -> None:
    n = token_count(real_model_path, LONG)
    assert n > 16
    r = httpx.post(f"{strict_server}/v1/embeddings", json={"input": ["short", LONG]})
    assert r.status_code == 413
    assert r.json()["error"]["message"].startswith(f"input 1 has {n} tokens, over the max input length of 16")
    # TEI's truncate overrides --no-auto-truncate for one request.
    ok = httpx.post(f"{strict_server}/embed", json={"inputs": ["short", LONG], "truncate": True})
    assert ok.status_code == 200 and len(ok.json()) == 2


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"input": "a"}, 422, "input: unknown field (known: inputs,"),
        ({"inputs": "a", "truncate": "yes"}, 422, "truncate: must be true or false, got a string"),
        ({"inputs": "a", "normalize": 1}, 422, "normalize: must be true or false, got a number"),
        ({"inputs": "a", "truncation_direction": "Left"}, 422, "truncation_direction: only 'Right' is supported"),
        ({"inputs": ["a"] * 5}, 413, "5 inputs in one request, over --max-client-batch-size 4"),
        ({"inputs": LONG}, 413, "input 0 has "),
    ],
)
def test_tei_errors_in_tei_shape(strict_server: str, body: dict, status: int, message: str) -> None:
    r = httpx.post(f"{strict_server}/embed", json=body)
    assert r.status_code == status
    assert r.json()["error"].startswith(message), r.json()
    assert r.json()["error_type"] == "Validation"


@pytest.mark.slow
def test_tei_normalize_false_returns_the_models_own_vectors(tiny_folder: Path) -> None:
    raw = Embedder.from_pretrained(tiny_folder)  # no sentence-transformers metadata: not normalized
    with running(lambda: raw) as (url, _):
        texts = ["alpha beta", "gamma"]
        unnormalized = httpx.post(f"{url}/embed", json={"inputs": texts, "normalize": False}).json()
        normalized = httpx.post(f"{url}/embed", json={"inputs": texts}).json()
        shortened = httpx.post(f"{url}/embed", json={"inputs": texts, "normalize": False, "dimensions": 8}).json()
    expected = raw.encode(texts)
    assert max_diff(unnormalized, expected) <= 1e-6
    assert max_diff(shortened, expected[:, :8]) <= 1e-6  # normalize: false holds with dimensions too
    assert max_diff(normalized, expected / np.linalg.norm(expected, axis=1, keepdims=True)) <= 1e-6


def test_orjson_and_json_write_the_same_float32_values(
    tiny_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orjson

    from bertlite.serve import endpoint

    texts = ["alpha beta", "gamma delta epsilon", ""]
    bodies = {}
    with running(lambda: tiny_embedder) as (url, _):
        for name, writer in (("orjson", orjson), ("json", None)):
            monkeypatch.setattr(endpoint, "orjson", writer)
            tei = httpx.post(f"{url}/embed", json={"inputs": texts})
            # dimensions slices the rows: the writer gets a non-contiguous view to copy.
            oa = httpx.post(f"{url}/v1/embeddings", json={"input": texts, "dimensions": 8})
            assert tei.status_code == oa.status_code == 200
            bodies[name] = (tei.json(), [d["embedding"] for d in oa.json()["data"]])
    for part in range(2):
        a, b = (np.asarray(bodies[name][part], dtype=np.float32) for name in ("orjson", "json"))
        assert a.shape == b.shape
        assert np.array_equal(a, b)
    assert max_diff(bodies["orjson"][0], tiny_embedder.encode(texts)) <= 1e-6
    cut = tiny_embedder.encode(texts)[:, :8]  # dimensions: cut, then re-normalized
    assert max_diff(bodies["orjson"][1], cut / np.linalg.norm(cut, axis=1, keepdims=True)) <= 1e-6


def test_a_worker_that_dies_fails_its_requests_and_health_instead_of_hanging(tiny_embedder: Embedder) -> None:
    with running(lambda: tiny_embedder) as (url, app):
        batcher = app.state.service.batcher

        def broken(batch: list) -> None:
            raise KeyError("a bug outside the forward")

        batcher._forward = broken
        # httpx's timeout bounds the wait: before the fix this request waited forever.
        r = httpx.post(f"{url}/embed", json={"inputs": ["alpha"]}, timeout=60)
        assert r.status_code == 500 and "the embedding worker stopped: KeyError" in r.json()["error"], r.json()
        health = httpx.get(f"{url}/health", timeout=60)
        assert health.status_code == 503 and "the embedding worker stopped" in health.text
        assert httpx.post(f"{url}/embed", json={"inputs": ["beta"]}, timeout=60).status_code == 503


@pytest.mark.slow
def test_nan_vectors_are_a_500_for_their_request_and_health_notices(real_model_path: Path, tmp_path: Path) -> None:
    folder = overflowing_model_folder(real_model_path, tmp_path / "overflow")
    assert np.isfinite(Embedder.from_pretrained(folder, dtype="float32").encode(["alpha"])).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowDtypeWarning)  # float16 on a CPU that emulates it
        embedder = Embedder.from_pretrained(folder, dtype="float16")
    with running(lambda: embedder) as (url, _):
        for body in ({"input": ["alpha", "beta"]}, {"input": "alpha", "encoding_format": "base64"}):
            r = httpx.post(f"{url}/v1/embeddings", json=body)
            assert r.status_code == 500, r.text
            assert r.json()["error"]["message"] == (
                "the model gave NaN or Inf in the vector of input 0 (an overflow in --dtype float16, or "
                "non-finite weights); serve the model in float32 or bfloat16"
            )
        tei = httpx.post(f"{url}/embed", json={"inputs": "alpha"})
        assert tei.status_code == 500 and "NaN or Inf" in tei.json()["error"], tei.text
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503 and "NaN or Inf" in health.json()["error"], health.text


@pytest.mark.slow
def test_serve_dtype_int8_builds_the_compiled_quantization_and_serves_the_int8_vectors(
    real_folder: Path, texts: list[str]
) -> None:
    from bertlite.cli import build_parser
    from bertlite.cli.loading import load_job
    from bertlite.quant.int8 import Int8Linear, compiled_quantization_built, describe_quantization

    args = build_parser().parse_args(["serve", str(real_folder), "--dtype", "int8"])
    embedder = load_job(args)
    assert embedder.precision == "int8" and compiled_quantization_built(), describe_quantization()
    assert all(m.compiled for m in embedder.model.modules() if isinstance(m, Int8Linear))
    expected = embedder.encode(texts)
    with running(lambda: embedder, model_name="minilm") as (url, _):
        body = httpx.post(f"{url}/v1/embeddings", json={"input": texts, "model": "minilm"}, timeout=60).json()
        info = httpx.get(f"{url}/info").json()
    got = np.asarray([d["embedding"] for d in body["data"]], dtype=np.float32)
    # One forward for the whole request (mixed lengths, attention per sequence) against encode's sorted
    # batches: equal here, but float32 noise between the two attentions may move one rounding step.
    cosine = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.9999
    assert info["dtype"] == "int8"
