"""The one wrapper every POST route runs in: API key, the model's kind, the body (size and time
bounded), parsing, 429, the work (dropped when the client goes away), JSON out, error bodies in
the route's API shape, metrics."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from bertlite.serve.batching import NotReadyError
from bertlite.serve.schemas import RequestError
from bertlite.serve.service import Service

try:  # in the serve extra; without it, the stdlib json writes the vectors, ~30x slower per request
    import orjson
except ImportError:
    orjson = None

T = TypeVar("T")


@dataclass(frozen=True)
class Handler:
    """One POST route: parse(body) -> request (RequestError for a bad one), then run(service, request)
    -> the JSON body, on the event loop (it awaits the worker)."""

    path: str
    parse: Callable[[bytes], Any]
    run: Callable[[Service, Any], Awaitable[Any]]

    @property
    def api(self) -> str:
        """The error shape: OpenAI's under /v1/ and /v2/, else TEI's."""
        return api_of(self.path)


def api_of(path: str) -> str:
    return "openai" if path.startswith(("/v1/", "/v2/")) else "tei"


def endpoint(service: Service, handler: Handler) -> Callable:
    """The starlette endpoint of handler, with everything the POST routes share."""

    async def handle(request: Request) -> Response:
        start = time.perf_counter()
        admitted = False
        try:
            check_key(service, request)
            if service.batcher.ready.is_set():  # before the body: a route the model cannot serve says so first
                service.check_route(handler.path)
            # A request counts as in flight once its body is in: clients stalled mid-body hold
            # only their connection (until --body-timeout), never a place another request needs.
            req = handler.parse(await read_body(request, service.limits))
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
            response = to_json(await unless_disconnected(request, handler.run(service, req)))
        except ClientDisconnect:  # nobody to answer; counted as nginx does
            response = Response(status_code=499)
        except RequestError as e:
            response = error(handler.api, e)
        except NotReadyError as e:
            response = error(handler.api, RequestError(503, str(e), code="model_not_ready"))
        except RuntimeError as e:  # the forward failed (the batcher printed the traceback)
            response = error(handler.api, RequestError(500, str(e), code="forward_failed"))
        except Exception as e:  # a bug: answered in the API's shape and counted, never a bare 500
            traceback.print_exc()
            response = error(
                handler.api, RequestError(500, f"internal error: {type(e).__name__}: {e}", code="internal")
            )
        finally:
            if admitted:
                service.in_flight -= 1
                service.metrics.in_flight.dec()
        service.metrics.requests.labels(handler.path, str(response.status_code)).inc()
        service.metrics.latency.labels(handler.path).observe(time.perf_counter() - start)
        return response

    return handle


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
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


def floats(vectors: np.ndarray) -> np.ndarray | list:
    """Vectors as the JSON body holds them: the array itself for orjson, lists for json."""
    return np.ascontiguousarray(vectors) if orjson is not None else vectors.tolist()


def to_json(body: Any) -> Response:
    """orjson writes float32 arrays in their shortest round-trip form: the same float32 values
    as json on tolist(), in about half the bytes."""
    if orjson is None:
        return JSONResponse(body)
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


async def read_body(request: Request, limits: Any) -> bytes:
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


def check_key(service: Service, request: Request) -> None:
    if service.api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise RequestError(401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
    if not hmac.compare_digest(given.strip().encode(), service.api_key.encode()):
        raise RequestError(401, "invalid API key", code="invalid_api_key")


def keyed(service: Service, respond: Callable[[Service], Response]) -> Callable:
    """A GET handler behind the API key: respond(service), or the 401 (in OpenAI's error form) without it."""

    async def handle(request: Request) -> Response:
        try:
            check_key(service, request)
        except RequestError as e:
            return error("openai", e)
        return respond(service)

    return handle


def http_error(service: Service) -> Callable:
    """Starlette's 404 and 405: in OpenAI's shape under /v1/, else TEI's; counted under endpoint="other"
    (not the path: a client could make every path a new metric)."""

    async def handle(request: Request, exc: HTTPException) -> Response:
        code = "not_found" if exc.status_code == 404 else "method_not_allowed"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        response = error(api_of(request.url.path), RequestError(exc.status_code, message, code=code))
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
    424: "invalid_request_error",
    429: "rate_limit_error",
}
_TEI_TYPES = {
    401: "Unauthorized",
    404: "Validation",
    405: "Validation",
    408: "Validation",
    413: "Validation",
    422: "Validation",
    424: "Backend",
    429: "Overloaded",
    503: "Unhealthy",
}


def error(api: str, e: RequestError) -> Response:
    """e as a response in the API's error shape: OpenAI's {"error": {message, type, param, code}},
    or TEI's {"error", "error_type"}."""
    if api == "openai":
        kind = _TYPES.get(e.status, "server_error")
        body: dict = {"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}}
    else:
        body = {"error": e.message, "error_type": _TEI_TYPES.get(e.status, "Backend")}
    # ASCII JSON: a message may quote a client's lone surrogate, which has no UTF-8.
    headers = {"connection": "close"} if e.close else None
    body_text = json.dumps(body, separators=(",", ":"))
    return Response(body_text, status_code=e.status, headers=headers, media_type="application/json")
