"""`bertlite serve`'s HTTP edge over raw sockets on 127.0.0.1: slow, stalled, idle and oversized
clients are cut off and never take a place another request needs; open connections are capped
below the process's file descriptors; clients that go away cost no forward; /health runs none."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from tokenizers import Encoding

from bertlite.jobs.embedder import Embedder
from bertlite.serve.app import Limits
from bertlite.serve.server import ConnectionLimits
from tests.helpers import ROOT
from tests.serve_helpers import (
    lines,
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    running,
    tiny_model_folder,
    wait_for,
)

KEY = "sk-edge"
WAIT_S = 30  # the longest a test waits for the server to do what it should


@pytest.fixture(scope="module")
def tiny_folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_folder(real_model_path, tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tiny_embedder(tiny_folder: Path) -> Embedder:
    return Embedder.from_pretrained(tiny_folder, dtype="float32", normalize=True)


def connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=WAIT_S)


def response(sock: socket.socket) -> tuple[int, bytes]:
    """The status and all the server sends until it closes the connection (socket.timeout after
    WAIT_S of silence: the server never answered)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data


def until(condition: Callable[[], bool], what: str) -> None:
    """Poll the server's state until condition() holds, at most WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the server never got to: {what}")
        time.sleep(0.01)


def metric(url: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(f"{url}/metrics").text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@contextlib.contextmanager
def server_log() -> Iterator[list[str]]:
    """The lines the server logs (uvicorn's logger, which does not propagate to pytest's caplog)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("uvicorn.error")
    log.addHandler(handler)
    try:
        yield lines
    finally:
        log.removeHandler(handler)


STALLED = b'POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"inputs":'


@pytest.mark.slow
def test_clients_stalled_mid_body_take_no_request_place_and_get_408(tiny_embedder: Embedder) -> None:
    limits = Limits(max_concurrent_requests=4, body_timeout=1.0)
    with running(lambda: tiny_embedder, limits) as (url, app):
        stalled = [connect(url) for _ in range(4)]
        for sock in stalled:
            sock.sendall(STALLED)
        tasks = app.state.server.server_state.tasks
        until(lambda: len(tasks) == 4, "a handler for each stalled request")
        ok = httpx.post(f"{url}/embed", json={"inputs": ["alpha"]}, timeout=WAIT_S)
        assert ok.status_code == 200, ok.text  # not 429: a request counts once its body is in
        for sock in stalled:
            status, data = response(sock)
            assert status == 408, data
            assert b"the body did not arrive within --body-timeout 1 s" in data
            sock.close()


@pytest.mark.slow
def test_idle_and_trickling_connections_are_closed_at_the_header_timeout(tiny_embedder: Embedder) -> None:
    with running(lambda: tiny_embedder, connection_limits=ConnectionLimits(header_timeout=0.5)) as (url, _):
        idle, trickle = connect(url), connect(url)
        trickle.sendall(b"POST /embed HTTP/1.1\r\n")
        for i in range(100):  # a header line every 0.1 s, until the server answers
            if select.select([trickle], [], [], 0.1)[0]:
                break
            trickle.sendall(f"X-Slow-{i}: y\r\n".encode())
        status, data = response(trickle)
        assert status == 408, data
        assert b"the request's headers did not arrive within --header-timeout 0.5 s" in data
        assert response(idle) == (0, b"")  # closed without an answer: it never asked anything
        idle.close()
        trickle.close()


@pytest.mark.slow
def test_a_kept_alive_connection_closes_at_the_keep_alive_timeout(tiny_embedder: Embedder) -> None:
    with running(lambda: tiny_embedder, connection_limits=ConnectionLimits(keep_alive_timeout=0.5)) as (url, _):
        sock = connect(url)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, data = response(sock)  # returns once the server closes the idle connection
        assert status == 200 and data.endswith(b'{"status":"ok"}'), data


def test_headers_over_the_limit_get_431_before_the_key_is_checked(tiny_embedder: Embedder) -> None:
    limits = ConnectionLimits(max_header_bytes=4096)
    with running(lambda: tiny_embedder, connection_limits=limits, api_key=KEY) as (url, _):
        # In one read: complete headers, over the limit.
        r = httpx.get(f"{url}/info", headers={"X-Big": "a" * 8000})
        assert r.status_code == 431
        assert r.json()["error"]["message"] == "the request line and headers are over --max-header-bytes 4096"
        # Headers that never end: refused once over the limit, not buffered until they do.
        with connect(url) as sock:
            sock.sendall(b"GET /info HTTP/1.1\r\nX-Big: " + b"a" * 8000)
            status, data = response(sock)
        assert status == 431, data
        # Within the limit, the key is checked as before.
        assert httpx.get(f"{url}/info", headers={"X-Small": "a" * 2000}).status_code == 401


def test_connections_over_the_cap_get_503_and_a_log_line(tiny_embedder: Embedder) -> None:
    with running(lambda: tiny_embedder, connection_limits=ConnectionLimits(max_connections=4)) as (url, app):
        connections = app.state.server.server_state.connections
        with server_log() as log:
            idle = [connect(url) for _ in range(4)]
            until(lambda: len(connections) == 4, "4 open connections")
            with connect(url) as extra:
                status, data = response(extra)
            assert status == 503, data
            assert b"too many open connections (--max-connections 4); retry later" in data
        assert any("refused 1 new connection(s) with 503: 4 are open, the --max-connections limit" in s for s in log)
        idle[0].close()
        until(lambda: len(connections) == 3, "the closed connection gone")
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        for sock in idle[1:]:
            sock.close()


SERVE = "import sys; from bertlite.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.slow
def test_under_a_low_ulimit_new_clients_get_503_and_the_log_says_why(tiny_folder: Path) -> None:
    fds = 256  # the server keeps 128 for itself: at most 128 connections
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2 * fds:
        pytest.skip("this test opens 300 sockets")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", str(tiny_folder), "--port", "0", "--dtype", "float32"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds)),
    )
    sockets: list[socket.socket] = []
    try:
        stderr = lines(proc.stderr)
        url = wait_for(stderr, "bertlite serve: ready on ").split("ready on ")[1].strip()
        sockets = [connect(url) for _ in range(300)]  # more than the descriptors the server may open
        with connect(url) as late:
            status, data = response(late)
        assert status == 503, data
        assert b"(--max-connections 128)" in data
        assert "the --max-connections limit" in wait_for(stderr, "refused")
    finally:
        for sock in sockets:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_health_runs_no_forward(tiny_embedder: Embedder) -> None:
    with running(lambda: tiny_embedder) as (url, _), httpx.Client(base_url=url) as http:
        for _ in range(50):
            assert http.get("/health").json() == {"status": "ok"}
        assert metric(url, "bertlite_batch_requests_count") == 0


def test_requests_whose_clients_went_away_are_dropped_before_compute(
    tiny_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, in_forward = threading.Event(), threading.Event()
    abandoned = 5
    with running(lambda: tiny_embedder) as (url, app):
        served = app.state.service.job
        served_encode = served.encode_tokenized

        def held(encodings: list[Encoding], **kwargs: object) -> np.ndarray:
            if "hold" in served.tokenizer.decode_batch([e.ids for e in encodings]):
                in_forward.set()
                if not gate.wait(WAIT_S):
                    raise TimeoutError("the test never released the model")
            return served_encode(encodings, **kwargs)

        monkeypatch.setattr(served, "encode_tokenized", held)

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=WAIT_S) as http:
                first = asyncio.create_task(http.post("/embed", json={"inputs": "hold"}))
                assert await asyncio.to_thread(in_forward.wait, WAIT_S)
                # While the model is busy, clients send complete requests and go away.
                for i in range(abandoned):
                    body = f'{{"inputs": "gone {i}"}}'.encode()
                    head = f"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    with connect(url) as sock:
                        sock.sendall(head + body)
                gone = 'bertlite_requests_total{endpoint="/embed",status="499"}'
                await asyncio.to_thread(until, lambda: metric(url, gone) == abandoned, "the clients gone")
                gate.set()
                return [await first, await http.post("/embed", json={"inputs": "after"})]

        responses = asyncio.run(scenario())
        assert [r.status_code for r in responses] == [200, 200]
        assert metric(url, "bertlite_batch_requests_sum") == 2  # "hold" and "after", none of the others
