"""The `bertlite serve` command: argparse only at import time, the server stack on use."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertlite.cli.args import add_command, add_model_placement
from bertlite.cli.loading import load_job

if TYPE_CHECKING:  # the server stack is imported on use
    from bertlite.serve.app import Limits
    from bertlite.serve.server import ConnectionLimits


SERVE_HELP = """\
Serve a model over HTTP, one model per server, its routes by its kind (detected
from its files, or --task): an embedding model serves OpenAI-compatible POST
/v1/embeddings and TEI-compatible /embed and /embed_all; a cross-encoder TEI's
/rerank and /predict and Cohere's /v1/rerank (/v2/rerank); a SPLADE model
/embed_sparse; a multi-vector (ColBERT) model /embed_all. Every model serves
/tokenize and /decode, GET /health, /info and /metrics (Prometheus); a route
the model cannot serve answers 424 naming the ones it does.

Concurrent requests are queued and one worker packs them into token-budget
batches (unpadded), so many small requests run as big batches and a big one
runs in several, each within --max-batch-tokens, taking turns with the others.
More than --max-concurrent-requests in flight get 429 at once; more inputs than
--max-client-batch-size (documents than --max-rerank-documents), a body over
--max-body-bytes, an input over --max-input-bytes or (with --no-auto-truncate)
over the max input length get 413; malformed requests get 422. Slow clients
are cut off: headers by --header-timeout (408), bodies by --body-timeout (408),
idle connections by --keep-alive-timeout; at most --max-connections are open
(more get 503).

The server listens at once; /health answers 503 until the model is loaded and
has run a forward. With an API key (env BERTLITE_API_KEY, --api-key-file or
--api-key), every endpoint but /health needs 'Authorization: Bearer KEY'.
SIGTERM stops accepting, finishes the requests in flight (up to
--grace-period) and exits 0.

Needs the serve extra: pip install 'bertlite[serve]'.

exit status: 0 stopped by SIGTERM, 2 usage or load error, 130 interrupted."""

KIND_NAMES = ("embedding", "cross-encoder", "sparse", "multi-vector", "m3")  # bertlite.jobs.kinds.KINDS, not imported
INSTALL_HINT = "bertlite serve needs starlette, uvicorn and prometheus_client: pip install 'bertlite[serve]'"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `serve` command and its options, in the order --help lists them.

    Args:
        commands: the `bertlite` parser's subcommands.
    """
    p = add_command(
        commands,
        "serve",
        help="serve a model over HTTP (OpenAI, TEI and Cohere APIs)",
        description=SERVE_HELP,
        model_help="a folder or a hub id",
    )
    p.add_argument(
        "--task",
        choices=("auto", *KIND_NAMES),
        default="auto",
        help="the model's kind, which picks its routes (default: auto, detected from the checkpoint's files)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port to bind; 0 picks a free one (default: 8080)")
    _add_model_arguments(p)
    _add_request_limit_arguments(p)
    _add_connection_arguments(p)
    p.add_argument(
        "--truncate-dim",
        type=int,
        metavar="N",
        help="serve the first N dimensions of each vector (as sentence-transformers' truncate_dim)",
    )
    _add_auth_arguments(p)
    p.add_argument(
        "--model-name",
        "--served-model-name",
        metavar="NAME",
        help="model name in responses and /info (default: MODEL's hub id, or a folder's own name without its path)",
    )
    p.add_argument(
        "--grace-period",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds SIGTERM waits for requests in flight (default: 30)",
    )


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Add how the model runs: add_model_placement's --dtype (int8 too), --device and --pack-weights, and --threads.

    Args:
        p: the `serve` parser.
    """
    add_model_placement(p, extra_dtypes=("int8",))
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch threads for the model (default: torch's, one per core); fewer when the cores are shared",
    )


def _add_request_limit_arguments(p: argparse.ArgumentParser) -> None:
    """Add the limits on batches and requests, the fields of bertlite.serve.app.Limits but --body-timeout.

    Args:
        p: the `serve` parser.
    """
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        default=16384,
        metavar="N",
        help="tokens the worker gathers from the queue into one batch (default: 16384)",
    )
    p.add_argument(
        "--max-client-batch-size", type=int, default=32, metavar="N", help="inputs per request (default: 32)"
    )
    p.add_argument(
        "--max-rerank-documents",
        type=int,
        default=1000,
        metavar="N",
        help="documents per rerank request, as Cohere's API takes (default: 1000)",
    )
    p.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=512,
        metavar="N",
        help="embedding requests in flight, counted once their body is in; more get 429 (default: 512)",
    )
    p.add_argument(
        "--max-input-length",
        type=int,
        metavar="N",
        help="tokens per input (default: the checkpoint's max_seq_length, else its max_position_embeddings)",
    )
    p.add_argument(
        "--auto-truncate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="truncate longer inputs (default); --no-auto-truncate answers 413 instead",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=2 * 1024 * 1024,
        metavar="N",
        help="bytes in one request body, as TEI's --payload-limit; more get 413 (default: 2097152, 2 MiB)",
    )
    p.add_argument(
        "--max-input-bytes",
        type=int,
        metavar="N",
        help="UTF-8 bytes in one input; more get 413 naming the input (default: only --max-body-bytes bounds it)",
    )


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """Add the limits that cut off slow clients and too many connections: --body-timeout and the fields of
    bertlite.serve.server.ConnectionLimits.

    Args:
        p: the `serve` parser.
    """
    p.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds from a request's headers to the end of its body; slower get 408 (default: 30)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds from connecting, or a request's first byte, to its last header byte; slower get 408 "
        "(default: 10)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds an idle connection stays open between requests (default: 5)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=32 * 1024,
        metavar="N",
        help="bytes in a request's line and headers; more get 431 (default: 32768, 32 KiB)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="open connections; more get 503 and a log line (default: 1024, fewer to keep 128 of `ulimit -n` free)",
    )


def _add_auth_arguments(p: argparse.ArgumentParser) -> None:
    """Add --api-key and --api-key-file, one or the other (_api_key reads them, or env BERTLITE_API_KEY).

    Args:
        p: the `serve` parser.
    """
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key", metavar="KEY", help="require 'Authorization: Bearer KEY' (default: env BERTLITE_API_KEY)"
    )
    key.add_argument(
        "--api-key-file", metavar="PATH", help="read the key from a file (surrounding whitespace is stripped)"
    )


def run(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"bertlite serve: error: {message}", file=sys.stderr, flush=True)
        return 2

    try:
        from bertlite.serve.app import create_app
        from bertlite.serve.server import bind, make_server
        from bertlite.serve.server import run as run_server
    except ImportError as e:
        return fail(f"{INSTALL_HINT} ({e})")
    try:
        limits, connection_limits = _limits(args)
        api_key = _api_key(args)
    except ValueError as e:
        return fail(str(e))
    try:
        sock = bind(args.host, args.port)
    except OSError as e:
        return fail(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    if warning := exposure_warning(args.host, api_key):
        print(f"bertlite serve: warning: {warning}", file=sys.stderr, flush=True)
    failed: list[str] = []

    def load() -> Any:
        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        return load_job(args)

    def on_loaded(error: str | None) -> None:
        if error is None:
            print(f"bertlite serve: ready on {url}", file=sys.stderr, flush=True)
            return
        failed.append(error)
        print(f"bertlite serve: error: {error}", file=sys.stderr, flush=True)
        server.should_exit = True

    app = create_app(
        load,
        limits,
        model_name=args.model_name or served_model_name(args.model),
        api_key=api_key,
        on_loaded=on_loaded,
        shutdown_timeout=args.grace_period,
    )
    server = make_server(app, args.grace_period, limits=connection_limits)
    print(f"bertlite serve: listening on {url}; loading {args.model}", file=sys.stderr, flush=True)
    run_server(server, sock)
    return 2 if failed else 0


def served_model_name(model: str) -> str:
    """The model's name in responses by default: a hub id as given; for a local folder its own name,
    since its full path would tell every client about the server's disk."""
    path = Path(model)
    return (path.resolve().name or "bertlite") if path.exists() else model


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """What to warn about a server bound to host: reachable from other machines without a key; else None."""
    if api_key is not None:
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # a host name
        if host == "localhost":
            return None
    return (
        f"listening on {host} without an API key: anyone who can reach this port can use the model; "
        "set BERTLITE_API_KEY or --api-key-file"
    )


def _api_key(args: argparse.Namespace) -> str | None:
    """The key from --api-key, --api-key-file or env BERTLITE_API_KEY, stripped as the client's is; None
    for none. A ValueError for a key given but empty: it would silently turn the check off."""
    if args.api_key is not None:
        key, source = args.api_key, "--api-key"
    elif args.api_key_file is not None:
        source = f"--api-key-file {args.api_key_file}"
        try:
            key = Path(args.api_key_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{source}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    elif "BERTLITE_API_KEY" in os.environ:
        key, source = os.environ["BERTLITE_API_KEY"], "env BERTLITE_API_KEY"
    else:
        return None
    if not key.strip():
        raise ValueError(f"{source} is empty, which would turn the key check off; give a key, or no key option")
    return key.strip()


def _limits(args: argparse.Namespace) -> tuple[Limits, ConnectionLimits]:
    """The server's limits; a ValueError names the first option out of range as the command line spells it."""
    from bertlite.serve.app import Limits, check_seconds
    from bertlite.serve.server import ConnectionLimits

    try:
        limits = Limits(
            max_batch_tokens=args.max_batch_tokens,
            max_client_batch_size=args.max_client_batch_size,
            max_rerank_documents=args.max_rerank_documents,
            max_concurrent_requests=args.max_concurrent_requests,
            max_input_length=args.max_input_length,
            auto_truncate=args.auto_truncate,
            max_body_bytes=args.max_body_bytes,
            max_input_bytes=args.max_input_bytes,
            body_timeout=args.body_timeout,
        )
        connection_limits = ConnectionLimits(
            max_connections=args.max_connections,
            max_header_bytes=args.max_header_bytes,
            header_timeout=args.header_timeout,
            keep_alive_timeout=args.keep_alive_timeout,
        )
    except ValueError as e:  # "max_input_length must be ..." -> "--max-input-length must be ..."
        raise ValueError(re.sub(r"^[a-z_]+", lambda m: "--" + m.group().replace("_", "-"), str(e))) from None
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
    check_seconds("--grace-period", args.grace_period)
    if args.truncate_dim is not None and args.truncate_dim < 1:
        raise ValueError(f"--truncate-dim must be >= 1, got {args.truncate_dim}")
    return limits, connection_limits
