"""A plain server for the serve job to compare with: Embedder.encode per request in starlette's thread pool.

What a FastAPI `def` endpoint does: one forward per request. `python -m bench.naive_server MODEL
[--threads N]` prints "ready on URL" to stderr once it listens (run by bench.serve_clients).
"""

from __future__ import annotations

import argparse
import sys


def naive_server(model: str, threads: int | None) -> None:
    """Serve POST /embed on a free local port until terminated.

    Args:
        model: the checkpoint folder.
        threads: torch threads, or None for torch's default.
    """
    import torch
    import uvicorn
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from bertlite import Embedder
    from bertlite.serve.server import bind

    if threads:
        torch.set_num_threads(threads)
    embedder = Embedder.from_pretrained(model, dtype="float32")
    embedder.encode([""])

    async def embed(request: Request) -> JSONResponse:
        texts = (await request.json())["inputs"]
        vectors = await run_in_threadpool(embedder.encode, texts)
        return JSONResponse(vectors.tolist())

    sock = bind("127.0.0.1", 0)
    print(f"ready on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    app = Starlette(routes=[Route("/embed", embed, methods=["POST"])])
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="checkpoint folder")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args()
    naive_server(args.model, args.threads)
