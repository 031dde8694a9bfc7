"""The ASGI app of `bertlite serve` (starlette): the routes of the loaded model's kind (routes/:
embeddings, rerank and classify, sparse, multi-vector, tokenizer), `/health`, `/info`, `/metrics`;
the limits. The wrapper every POST route shares is endpoint.py."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bertlite.serve.batching import Batcher, NotReadyError
from bertlite.serve.endpoint import endpoint, http_error, keyed
from bertlite.serve.metrics import CONTENT_TYPE, Metrics
from bertlite.serve.routes import embed, rerank, tokens
from bertlite.serve.service import Service, labels

MAX_BODY_BYTES = 2 * 1024 * 1024  # as TEI's default payload limit
MAX_SECONDS = 86400.0  # the longest timeout or grace period accepted: a day


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
    max_rerank_documents: int = 1000  # documents in one rerank request (Cohere's limit)
    max_concurrent_requests: int = 512  # requests whose body is in, waiting for their vectors; more get 429 at once
    max_input_length: int | None = None  # tokens per input; default: the job's max_length
    auto_truncate: bool = True  # longer inputs are truncated (else 413), unless a TEI request says otherwise
    max_body_bytes: int = MAX_BODY_BYTES
    max_input_bytes: int | None = None  # UTF-8 bytes of one input; None: only max_body_bytes bounds it
    body_timeout: float = 30.0  # seconds from a request's headers to the end of its body

    def __post_init__(self) -> None:
        for name in (
            "max_batch_tokens",
            "max_client_batch_size",
            "max_rerank_documents",
            "max_concurrent_requests",
            "max_body_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_input_bytes is not None and self.max_input_bytes < 1:
            raise ValueError(f"max_input_bytes must be >= 1, got {self.max_input_bytes}")
        if self.max_input_length is not None and self.max_input_length < 2:
            raise ValueError(f"max_input_length must be >= 2 ([CLS] and [SEP]), got {self.max_input_length}")
        check_seconds("body_timeout", self.body_timeout, minimum=1e-3)


def create_app(
    load: Callable[[], Any],
    limits: Limits | None = None,
    *,
    model_name: str = "bertlite",
    api_key: str | None = None,
    on_loaded: Callable[[str | None], None] | None = None,
    shutdown_timeout: float = 30.0,
) -> Starlette:
    """Build the Starlette app: every route of every kind of model (those the loaded model cannot
    serve answer 424 saying which it can), /health, /info, /metrics.

    Args:
        load: builds the job (an Embedder, CrossEncoder, SparseEncoder or MultiVectorEncoder: see
            bertlite.jobs.kinds.load_job), in the worker thread once the app starts (lifespan); until
            it is done, /health and the model's routes answer 503.
        limits: the server's limits; None: Limits()'s defaults. limits.max_input_length, when given,
            becomes that job's max_length (it may not exceed the model's max_position_embeddings).
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
    service = Service(batcher, limits, model_name, api_key)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        batcher.start()
        yield
        batcher.stop(shutdown_timeout)

    handlers = (*embed.HANDLERS, *rerank.HANDLERS, *tokens.HANDLERS)
    routes = [Route(h.path, endpoint(service, h), methods=["POST"]) for h in handlers]
    routes += [
        Route("/health", _health(service), methods=["GET"]),
        Route("/info", keyed(service, _info), methods=["GET"]),
        Route("/metrics", keyed(service, _metrics), methods=["GET"]),
    ]
    # Unknown routes and methods answer in the API's error shape too, and are counted.
    errors = {HTTPException: http_error(service)}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=errors)
    app.state.loaded = batcher.done  # a threading.Event: the model is ready, or failed to load
    app.state.service = service
    return app


def _health(service: Service) -> Callable:
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


def _info(service: Service) -> Response:
    job = service.job if service.batcher.ready.is_set() else None
    body: dict[str, Any] = {"model": service.model_name, "ready": job is not None, "limits": asdict(service.limits)}
    if job is None:
        return JSONResponse(body)
    body |= {
        "model_type": _model_type(service),
        "routes": list(service.routes),
        "max_input_length": service.limits.max_input_length,
        "dtype": job.precision,
        "precision": job.precision,  # float32 unless the server was started with --dtype
        "precision_reason": job.precision_reason,
    }
    if service.model_type == "embedding":
        body |= {
            "dimension": job.dimension,
            "pooling": job.pooling,
            "normalize": job.normalize,
            "prompts": job.prompts,
            "default_prompt_name": job.default_prompt_name,
        }
    elif service.model_type in ("sparse", "multi-vector", "m3"):
        body["dimension"] = job.dimension
    return JSONResponse(body)


def _model_type(service: Service) -> dict[str, Any]:
    """TEI's model_type: {"embedding": {"pooling"}}, {"reranker"|"classifier": {"id2label", "label2id"}};
    a SPLADE model is TEI's embedding with pooling "splade", a multi-vector one {"multi_vector": {}}, and a
    BGE-M3 model TEI's cls embedding beside {"m3": {"outputs"}}."""
    kind = service.model_type
    if kind == "embedding":
        return {"embedding": {"pooling": "+".join(service.job.pooling)}}
    if kind == "sparse":
        return {"embedding": {"pooling": "splade"}}
    if kind == "multi-vector":
        return {"multi_vector": {}}
    if kind == "m3":  # TEI's embedding (the dense vector is the first token's), with the other outputs
        return {"embedding": {"pooling": "cls"}, "m3": {"outputs": ["dense", "sparse", "multi_vector"]}}
    names = labels(service.job, service.job.num_labels)
    return {kind: {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}}


def _metrics(service: Service) -> Response:
    return Response(service.metrics.render(), media_type=CONTENT_TYPE)
