"""Run an app under uvicorn on a socket bound here (port 0 picks a free port, which is
then known before the first request), and shut down gracefully on SIGTERM / Ctrl-C."""

from __future__ import annotations

import signal
import socket

import uvicorn
from starlette.applications import Starlette


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
    sock.listen(2048)
    return sock


def make_server(app: Starlette, grace_period: float, log_level: str = "info") -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        # uvicorn stops accepting at once, then waits this long for requests in flight.
        timeout_graceful_shutdown=grace_period,
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
