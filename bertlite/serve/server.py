"""Run an app under uvicorn on a socket bound here (port 0 picks a free port, which is
then known before the first request), and shut down gracefully on SIGTERM / Ctrl-C.

uvicorn bounds how long an idle connection stays open between requests, but not how long a
client may take to send a request's headers, how large they may be, or how many connections
are open: a client that connects and sends nothing, or trickles a header byte at a time, or
sends 64 MB of headers, would hold its socket and memory for as long as it likes, and enough
such sockets use up the process's file descriptors. `EdgeProtocol` adds those three bounds to
uvicorn's httptools protocol. (How long a request's body may take is the app's to bound: it
answers in the API's error shape.)
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bertlite.serve.app import check_seconds

MAX_CONNECTIONS = 1024
# Descriptors left for everything but client sockets (model files, the listening socket, logs, threads).
RESERVED_FDS = 128
BACKLOG = 2048  # connections that wait in the kernel until they are accepted
REFUSAL_LOG_EVERY_S = 10.0  # at most one log line this often while connections are refused

logger = logging.getLogger("uvicorn.error")  # uvicorn's logger: its format and --log-level


def fd_limit() -> int | None:
    """The soft limit on open file descriptors (`ulimit -n`); None where there is none to read."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


@dataclass
class ConnectionLimits:
    """What a connection may take before the app sees a request (bertlite serve's flags of the same names).

    Raises ValueError on construction for a limit out of range, or a max_connections that leaves fewer
    than RESERVED_FDS of the descriptors `ulimit -n` allows.
    """

    max_connections: int | None = None  # open connections; None: MAX_CONNECTIONS, fewer under a low `ulimit -n`
    max_header_bytes: int = 32 * 1024  # the request line and headers of one request (nginx: 4 x 8 KiB)
    header_timeout: float = 10.0  # seconds from connecting (or a request's first byte) to its last header byte
    keep_alive_timeout: float = 5.0  # seconds an idle connection stays open between requests (uvicorn's default)

    def __post_init__(self) -> None:
        if self.max_header_bytes < 1024:
            raise ValueError(f"max_header_bytes must be >= 1024, got {self.max_header_bytes}")
        check_seconds("header_timeout", self.header_timeout, minimum=1e-3)
        check_seconds("keep_alive_timeout", self.keep_alive_timeout, minimum=1e-3)
        fds = fd_limit()
        room = MAX_CONNECTIONS if fds is None else fds - RESERVED_FDS
        if self.max_connections is None:
            if room < 1:
                raise ValueError(f"max_connections: none fit, `ulimit -n` is {fds} and the server keeps {RESERVED_FDS}")
            self.max_connections = min(MAX_CONNECTIONS, room)
        elif self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        elif fds is not None and self.max_connections > room:
            raise ValueError(
                f"max_connections must leave {RESERVED_FDS} of the {fds} file descriptors `ulimit -n` allows "
                f"for the model and the server, got {self.max_connections}: raise `ulimit -n` or lower it"
            )


class _Refusals:
    """Connections refused over max_connections, logged at most once every REFUSAL_LOG_EVERY_S."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at = -math.inf

    def add(self, limit: int) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at >= REFUSAL_LOG_EVERY_S:
            logger.warning(
                "refused %d new connection(s) with 503: %d are open, the --max-connections limit", self.count, limit
            )
            self.logged_at, self.count = now, 0


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus a cap on open connections, a deadline for each request's
    line and headers (from the connection's start, or the request's first byte), and a bound on their size."""

    def __init__(self, *args: Any, limits: ConnectionLimits, refusals: _Refusals, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.refusals = refusals
        self.refused = False
        self.header_bytes: int | None = 0  # bytes of this request's line and headers so far; None once complete
        self.header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self.transport = transport  # connection_lost closes it
            self.refusals.add(self.limits.max_connections)
            limit = self.limits.max_connections
            self._refuse(503, f"too many open connections (--max-connections {limit}); retry later", "overloaded")
            return
        super().connection_made(transport)
        self._start_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.header_bytes is not None:
            self.header_bytes += len(data)
        super().data_received(data)
        # Headers still incomplete: httptools holds them all in memory, so stop before they grow further.
        if self.header_bytes is not None and self.header_bytes > self.limits.max_header_bytes:
            self._refuse_large_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_deadline()  # a request on a kept-alive connection: its own deadline

    def on_headers_complete(self) -> None:
        # The data_received count misses headers that arrive complete in one read.
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_header_bytes:
            self._refuse_large_headers()
            return
        self.header_bytes = None
        self._stop_header_deadline()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        super().on_message_complete()
        self.header_bytes = 0  # the next request's headers start here

    def _start_header_deadline(self) -> None:
        if self.header_deadline is None:
            self.header_deadline = self.loop.call_later(self.limits.header_timeout, self._header_timed_out)

    def _stop_header_deadline(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _header_timed_out(self) -> None:
        self.header_deadline = None
        if self.transport.is_closing() or self.header_bytes is None:
            return
        if self.header_bytes == 0:  # an idle connection that never sent a byte: closed, as uvicorn's keep-alive does
            self.transport.close()
            return
        timeout = self.limits.header_timeout
        self._refuse(408, f"the request's headers did not arrive within --header-timeout {timeout:g} s", "timeout")

    def _refuse_large_headers(self) -> None:
        limit = self.limits.max_header_bytes
        message = f"the request line and headers are over --max-header-bytes {limit}"
        self._refuse(431, message, "headers_too_large")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer status (in OpenAI's error shape: the route is not known yet) and close the connection."""
        self.refused = True
        self._stop_header_deadline()
        if self.transport.is_closing():
            return
        kind = "invalid_request_error" if status < 500 else "server_error"
        error = {"message": message, "type": kind, "param": None, "code": code}
        body = json.dumps({"error": error}, separators=(",", ":")).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def bind(host: str, port: int) -> socket.socket:
    """A listening socket: connections wait in its backlog until uvicorn accepts them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(BACKLOG)
    return sock


def make_server(
    app: Starlette, grace_period: float, log_level: str = "info", limits: ConnectionLimits | None = None
) -> uvicorn.Server:
    """A uvicorn server for app, with EdgeProtocol's limits (None: ConnectionLimits()'s defaults)."""
    limits = limits or ConnectionLimits()
    config = uvicorn.Config(
        app,
        http=functools.partial(EdgeProtocol, limits=limits, refusals=_Refusals()),  # type: ignore[arg-type]
        ws="none",  # no WebSocket routes: an upgrade request is an ordinary request
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type]
        # uvicorn stops accepting at once, then waits this long for requests in flight.
        timeout_graceful_shutdown=grace_period,  # type: ignore[arg-type]
    )
    return uvicorn.Server(config)


def run(server: uvicorn.Server, sock: socket.socket) -> None:
    """Serve until SIGTERM or SIGINT, then drain. Returns normally after SIGTERM (exit 0);
    raises KeyboardInterrupt after SIGINT."""
    # uvicorn re-raises the signal it shut down on, with the handler that was there before:
    # a no-op for SIGTERM makes a drained shutdown an ordinary return.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
