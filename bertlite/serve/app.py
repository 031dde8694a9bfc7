"""The ASGI app of `bertlite serve` (starlette): OpenAI `/v1/embeddings`, TEI `/embed`,
`/health`, `/info`, `/metrics`; limits, API key, error bodies in each API's shape."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import math
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tokenizers import Encoding

from bertlite.embed.embedder import Embedder
from bertlite.embed.io import SURROGATE
from bertlite.serve.batching import Batcher, NotReadyError
from bertlite.serve.metrics import CONTENT_TYPE, Metrics
from bertlite.serve.schemas import EmbedRequest, RequestError, parse_openai, parse_tei

try:  # in the serve extra; without it, the stdlib json writes the vectors, ~30x slower per request
    import orjson
except ImportError:
    orjson = None

MAX_BODY_BYTES = 2 * 1024 * 1024  # as TEI's default payload limit
MAX_SECONDS = 86400.0  # the longest timeout or grace period accepted: a day
T = TypeVar("T")


def check_seconds(name: str, value: float, minimum: float = 0.0) -> None:
    """ValueError unless value is a finite number of seconds from minimum to MAX_SECONDS (not nan, inf, 1e300)."""
    if not (math.isfinite(value) and minimum <= value <= MAX_SECONDS):
        raise ValueError(f"{name} must be a number of seconds from {minimum:g} to {MAX_SECONDS:g}, got {value}")


@dataclass
class Limits:
    """The server's limits, as explicit options (bertlite serve's flags of the same names).

    Raises ValueError on construction for a limit below 1, a max_input_length below 2, or a
    body_timeout that is not a finite number of seconds.
    """

    max_batch_tokens: int = 16384  # tokens the worker gathers into one batch
    max_client_batch_size: int = 32  # inputs in one request
    max_concurrent_requests: int = 512  # requests whose body is in, waiting for their vectors; more get 429 at once
    max_input_length: int | None = None  # tokens per input; default: the Embedder's max_length
    auto_truncate: bool = True  # longer inputs are truncated (else 413), unless a TEI request says otherwise
    max_body_bytes: int = MAX_BODY_BYTES
    max_input_bytes: int | None = None  # UTF-8 bytes of one input; None: only max_body_bytes bounds it
    body_timeout: float = 30.0  # seconds from a request's headers to the end of its body

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_client_batch_size", "max_concurrent_requests", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_input_bytes is not None and self.max_input_bytes < 1:
            raise ValueError(f"max_input_bytes must be >= 1, got {self.max_input_bytes}")
        if self.max_input_length is not None and self.max_input_length < 2:
            raise ValueError(f"max_input_length must be >= 2 ([CLS] and [SEP]), got {self.max_input_length}")
        check_seconds("body_timeout", self.body_timeout, minimum=1e-3)


class _Service:
    """What the handlers share: the batcher, limits, key, metrics."""

    def __init__(self, batcher: Batcher, limits: Limits, model_name: str, api_key: str | None) -> None:
        self.batcher = batcher
        self.limits = limits
        self.model_name = model_name
        self.api_key = api_key
        self.metrics = batcher.metrics
        self.in_flight = 0  # touched only on the event loop

    @property
    def embedder(self) -> Embedder:
        return self.batcher.embedder

    def prepare(self, embedder: Embedder) -> Embedder:
        """Apply the limits to a freshly loaded Embedder (in the worker thread, before it is ready)."""
        if self.limits.max_input_length is not None:
            if self.limits.max_input_length > embedder.model.config.max_position_embeddings:
                raise ValueError(
                    f"max_input_length={self.limits.max_input_length} exceeds the model's "
                    f"max_position_embeddings={embedder.model.config.max_position_embeddings}"
                )
            embedder.max_length = self.limits.max_input_length
        self.limits.max_input_length = embedder.max_length
        return embedder


def create_app(
    load: Callable[[], Embedder],
    limits: Limits | None = None,
    *,
    model_name: str = "bertlite",
    api_key: str | None = None,
    on_loaded: Callable[[str | None], None] | None = None,
    shutdown_timeout: float = 30.0,
) -> Starlette:
    """Build the Starlette app: /v1/embeddings (OpenAI), /embed (TEI), /health, /info, /metrics.

    Args:
        load: builds the Embedder, in the worker thread once the app starts (lifespan); until it is
            done, /health and the embedding endpoints answer 503.
        limits: the server's limits; None: Limits()'s defaults. limits.max_input_length, when given,
            becomes that Embedder's max_length (it may not exceed the model's max_position_embeddings).
        model_name: the model name in responses and /info.
        api_key: when set, the embedding endpoints, /info and /metrics need
            `Authorization: Bearer <key>` (else 401); None: no key. Surrounding whitespace (a key
            file's newline) is stripped, as from the client's key; a key that is then empty is a
            ValueError, since it would turn the check off.
        on_loaded: on_loaded(error) is called from the worker thread once the model is ready (error
            None) or failed to load (error says why); see Batcher.
        shutdown_timeout: seconds to wait for the worker thread on shutdown.

    Returns:
        The app; app.state.loaded is a threading.Event set once the model is ready or failed to load.
    """
    limits = limits or Limits()
    if api_key is not None:
        api_key = api_key.strip()
        if not api_key:
            raise ValueError("the API key is empty; give a key, or none for a server without one")
    batcher = Batcher(lambda: service.prepare(load()), limits.max_batch_tokens, Metrics(), on_loaded)
    service = _Service(batcher, limits, model_name, api_key)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        batcher.start()
        yield
        batcher.stop(shutdown_timeout)

    routes = [
        Route("/v1/embeddings", _endpoint(service, "openai"), methods=["POST"]),
        Route("/embed", _endpoint(service, "tei"), methods=["POST"]),
        Route("/health", _health(service), methods=["GET"]),
        Route("/info", _keyed(service, _info), methods=["GET"]),
        Route("/metrics", _keyed(service, _metrics), methods=["GET"]),
    ]
    # Unknown routes and methods answer in the API's error shape too, and are counted.
    handlers = {HTTPException: _http_error(service)}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.state.loaded = batcher.done  # a threading.Event: the model is ready, or failed to load
    app.state.service = service
    return app


# --- embedding endpoints ----------------------------------------------------------


def _endpoint(service: _Service, api: str) -> Callable:
    parse = parse_openai if api == "openai" else parse_tei
    path = "/v1/embeddings" if api == "openai" else "/embed"

    async def handle(request: Request) -> Response:
        start = time.perf_counter()
        admitted = False
        try:
            _check_key(service, request)
            # A request counts as in flight once its body is in: clients stalled mid-body hold
            # only their connection (until --body-timeout), never a place another request needs.
            req = parse(await _read_body(request, service.limits))
            if service.in_flight >= service.limits.max_concurrent_requests:
                raise RequestError(
                    429,
                    f"too many requests in flight (--max-concurrent-requests "
                    f"{service.limits.max_concurrent_requests}); retry later",
                    code="overloaded",
                )
            service.in_flight += 1
            service.metrics.in_flight.inc()
            admitted = True
            vectors, tokens = await _unless_disconnected(request, _embed(service, req))
            body = _openai_body(service, req, vectors, tokens) if api == "openai" else _floats(vectors)
            response = _json(body)
        except ClientDisconnect:  # nobody to answer; counted as nginx does
            response = Response(status_code=499)
        except RequestError as e:
            response = _error(api, e)
        except NotReadyError as e:
            response = _error(api, RequestError(503, str(e), code="model_not_ready"))
        except RuntimeError as e:  # the forward failed (the batcher printed the traceback)
            response = _error(api, RequestError(500, str(e), code="forward_failed"))
        except Exception as e:  # a bug: answered in the API's shape and counted, never a bare 500
            traceback.print_exc()
            response = _error(api, RequestError(500, f"internal error: {type(e).__name__}: {e}", code="internal"))
        finally:
            if admitted:
                service.in_flight -= 1
                service.metrics.in_flight.dec()
        service.metrics.requests.labels(path, str(response.status_code)).inc()
        service.metrics.latency.labels(path).observe(time.perf_counter() - start)
        return response

    return handle


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """work's result, or ClientDisconnect as soon as the client goes away; work is then cancelled,
    so a request still queued is dropped before the worker computes it."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is itself cancelled
        gone.cancel()
        task.cancel()  # a no-op once it is done
    if task not in done:
        raise ClientDisconnect()
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects. The body is read, so the server has nothing else to say
    until then (ASGI: receive() waits for http.disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _embed(service: _Service, req: EmbedRequest) -> tuple[np.ndarray, int]:
    service.batcher.check_ready()
    limits, embedder = service.limits, service.embedder
    if len(req.texts) > limits.max_client_batch_size:
        raise RequestError(
            413,
            f"{len(req.texts)} inputs in one request, over --max-client-batch-size {limits.max_client_batch_size}",
            "input",
            "too_many_inputs",
        )
    if limits.max_input_bytes is not None:
        for i, text in enumerate(req.texts):
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > limits.max_input_bytes:
                raise RequestError(
                    413,
                    f"input {i} is {size} bytes (UTF-8), over --max-input-bytes {limits.max_input_bytes}",
                    "input",
                    "input_too_large",
                )
    try:
        prompt = embedder.resolve_prompt(req.prompt, req.prompt_name)
    except ValueError as e:
        raise RequestError(422, str(e), "prompt_name", "invalid_request") from e
    if req.dimensions is not None and req.dimensions > embedder.dimension:
        raise RequestError(
            422, f"dimensions: {req.dimensions} is more than the model's {embedder.dimension}", "dimensions"
        )
    texts = [prompt + text for text in req.texts] if prompt else req.texts
    for i, text in enumerate(texts):
        if surrogate := SURROGATE.search(text):
            raise RequestError(
                422,
                f"input[{i}] holds a lone surrogate (\\u{ord(surrogate.group()):04x}), which is not Unicode text",
                "input",
                "invalid_request",
            )
    truncate = limits.auto_truncate if req.truncate is None else req.truncate
    # Off the event loop: a request of long texts takes a while to tokenize, and other requests must not wait.
    encodings = await asyncio.get_running_loop().run_in_executor(None, _tokenize, service, texts, truncate)
    tokens = sum(len(e.ids) for e in encodings)
    vectors = await service.batcher.embed(encodings, tokens)
    service.metrics.tokens.inc(tokens)
    if req.dimensions is not None:
        vectors = vectors[:, : req.dimensions]
    if req.normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors.astype(np.float32, copy=False), tokens


def _tokenize(service: _Service, texts: list[str], truncate: bool) -> list[Encoding]:
    """The encodings the worker runs, truncated at the max input length (the Embedder's max_length);
    without truncate, the 413 for the first input over it, with its full token count."""
    encodings = service.embedder.tokenize(texts)
    if not truncate:
        for i, e in enumerate(encodings):
            if e.overflowing:
                n = service.embedder.count_tokens(texts[i])
                raise RequestError(
                    413,
                    f"input {i} has {n} tokens, over the max input length of {service.limits.max_input_length} "
                    "(send shorter texts, or truncate: start the server with --auto-truncate)",
                    "input",
                    "input_too_long",
                )
    return encodings


def _openai_body(service: _Service, req: EmbedRequest, vectors: np.ndarray, tokens: int) -> dict:
    if req.encoding_format == "base64":
        # OpenAI's base64: the float32 bytes, little-endian, of each vector.
        embeddings = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    else:
        embeddings = _floats(vectors)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)],
        "model": service.model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _floats(vectors: np.ndarray) -> np.ndarray | list:
    """The vectors as the JSON body holds them: the array itself for orjson, lists for json."""
    return np.ascontiguousarray(vectors) if orjson is not None else vectors.tolist()


def _json(body: Any) -> Response:
    """orjson writes float32 arrays in their shortest round-trip form: the same float32 values
    as json on tolist(), in about half the bytes."""
    if orjson is None:
        return JSONResponse(body)
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


async def _read_body(request: Request, limits: Limits) -> bytes:
    """The body, within limits.max_body_bytes (else 413) and limits.body_timeout (else 408); both
    errors close the connection, whose unread body would otherwise still arrive."""
    limit = limits.max_body_bytes
    too_large = RequestError(413, f"the body is over --max-body-bytes {limit}", code="body_too_large", close=True)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), limits.body_timeout)
    except asyncio.TimeoutError:
        timeout = limits.body_timeout
        raise RequestError(
            408, f"the body did not arrive within --body-timeout {timeout:g} s", code="timeout", close=True
        ) from None


# --- the other endpoints ----------------------------------------------------------


def _health(service: _Service) -> Callable:
    async def handle(request: Request) -> Response:
        # The worker's own state; a forward runs only after a failed one (Batcher.check_health).
        try:
            await service.batcher.check_health()
        except NotReadyError as e:
            response = JSONResponse({"status": "unavailable", "error": str(e)}, status_code=503)
        except RuntimeError as e:
            response = JSONResponse({"status": "unhealthy", "error": str(e)}, status_code=503)
        else:
            response = JSONResponse({"status": "ok"})
        service.metrics.requests.labels("/health", str(response.status_code)).inc()
        return response

    return handle


def _keyed(service: _Service, respond: Callable[[_Service], Response]) -> Callable:
    """A GET handler behind the API key: respond(service), or the 401 (in OpenAI's error form) without it."""

    async def handle(request: Request) -> Response:
        try:
            _check_key(service, request)
        except RequestError as e:
            return _error("openai", e)
        return respond(service)

    return handle


def _info(service: _Service) -> Response:
    embedder = service.embedder if service.batcher.ready.is_set() else None
    body = {"model": service.model_name, "ready": embedder is not None, "limits": asdict(service.limits)}
    if embedder is not None:
        body |= {
            "dimension": embedder.dimension,
            "max_input_length": service.limits.max_input_length,
            "dtype": embedder.precision,
            "pooling": embedder.pooling,
            "normalize": embedder.normalize,
            "prompts": embedder.prompts,
            "default_prompt_name": embedder.default_prompt_name,
        }
    return JSONResponse(body)


def _metrics(service: _Service) -> Response:
    return Response(service.metrics.render(), media_type=CONTENT_TYPE)


def _check_key(service: _Service, request: Request) -> None:
    if service.api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise RequestError(401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
    if not hmac.compare_digest(given.strip().encode(), service.api_key.encode()):
        raise RequestError(401, "invalid API key", code="invalid_api_key")


def _http_error(service: _Service) -> Callable:
    """Starlette's 404 and 405: in OpenAI's shape under /v1/, else TEI's; counted under endpoint="other"
    (not the path: a client could make every path a new metric)."""

    async def handle(request: Request, exc: HTTPException) -> Response:
        api = "openai" if request.url.path.startswith("/v1/") else "tei"
        code = "not_found" if exc.status_code == 404 else "method_not_allowed"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        response = _error(api, RequestError(exc.status_code, message, code=code))
        response.headers.update(exc.headers or {})  # 405's Allow
        service.metrics.requests.labels("other", str(response.status_code)).inc()
        return response

    return handle


_TYPES = {
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_TEI_TYPES = {
    401: "Unauthorized",
    404: "Validation",
    405: "Validation",
    408: "Validation",
    413: "Validation",
    422: "Validation",
    429: "Overloaded",
    503: "Unhealthy",
}


def _error(api: str, e: RequestError) -> Response:
    if api == "openai":
        kind = _TYPES.get(e.status, "server_error")
        body: dict = {"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}}
    else:
        body = {"error": e.message, "error_type": _TEI_TYPES.get(e.status, "Backend")}
    # ASCII JSON: a message may quote a client's lone surrogate, which has no UTF-8.
    headers = {"connection": "close"} if e.close else None
    body_text = json.dumps(body, separators=(",", ":"))
    return Response(body_text, status_code=e.status, headers=headers, media_type="application/json")
