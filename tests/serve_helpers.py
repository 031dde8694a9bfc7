"""Shared by the `bertlite serve` tests: a tiny random model folder and an in-process server."""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from bertlite import BertConfig, BertModel
from bertlite.jobs.embedder import Embedder
from bertlite.serve.app import Limits, create_app
from bertlite.serve.server import ConnectionLimits, bind, make_server
from tests.helpers import TINY

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread: on the shared 2-core test machine, two OpenMP threads that wait for
    each other at every barrier made the tiny model 15x slower (measured), and the server's
    worker shares the cores with the clients in the same process anyway."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model_folder(real_model_path: Path, folder: Path) -> Path:
    """A random 2-layer BERT (hidden 32) with the real checkpoint's tokenizer: fast, but real text."""
    torch.manual_seed(0)
    config = BertConfig(**{**TINY, "vocab_size": 30522, "max_position_embeddings": 512})
    model = BertModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (real_model_path / name).exists():
            shutil.copy(real_model_path / name, folder / name)
    return folder


def overflowing_model_folder(real_model_path: Path, folder: Path) -> Path:
    """The tiny model with weights so large that its feed-forward activations (~1e5) overflow float16's
    range (65,504) and its vectors become NaN; in float32 they stay finite."""
    tiny_model_folder(real_model_path, folder)
    model = BertModel.from_pretrained(folder)
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.output.LayerNorm.weight.mul_(1000.0)
            layer.intermediate.dense.weight.mul_(1000.0)
    model.save_pretrained(folder)
    return folder


def prompts_folder(real_model_path: Path, folder: Path, prompts: dict, default: str | None = None) -> Path:
    """The real checkpoint's files (linked) plus a config_sentence_transformers.json with prompts."""
    folder.mkdir()
    for item in real_model_path.iterdir():
        if item.name != "config_sentence_transformers.json":
            (folder / item.name).symlink_to(item)
    config = {"prompts": prompts, "default_prompt_name": default, "similarity_fn_name": "cosine"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    return folder


@contextlib.contextmanager
def running(
    load: Callable[[], Embedder],
    limits: Limits | None = None,
    connection_limits: ConnectionLimits | None = None,
    **kwargs: object,
) -> Iterator[tuple[str, Any]]:
    """(base url, app) of a server on 127.0.0.1, on a free port, in a thread; stopped on exit.
    app.state.server is the uvicorn server (its server_state holds the open connections and tasks)."""
    app = create_app(load, limits, **kwargs)
    # Bound and listening before uvicorn starts: a client may connect at once.
    sock = bind("127.0.0.1", 0)
    server = make_server(app, grace_period=10, log_level="warning", limits=connection_limits)
    app.state.server = server
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not app.state.loaded.wait(120):
            raise TimeoutError("the model did not load in 120 s")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def lines(stream: object) -> queue.Queue[str]:
    """A queue of the stream's lines, read in a thread, so waiting for one can time out."""
    out: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            out.put(line)
        out.put("")  # end of stream

    threading.Thread(target=read, daemon=True).start()
    return out


def wait_for(stream: queue.Queue[str], text: str, timeout: float = 120) -> str:
    while True:
        line = stream.get(timeout=timeout)
        if not line:
            raise AssertionError(f"the server ended before printing {text!r}")
        if text in line:
            return line
