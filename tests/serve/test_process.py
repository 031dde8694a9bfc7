"""`bertlite serve` as a process: SIGTERM drains the request in flight and exits 0; load and
usage errors exit 2 with one line; `import bertlite` and `bertlite embed` never import the server stack."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from bertlite.cli import main
from bertlite.jobs.embedder import Embedder
from tests.helpers import ROOT, damaged_tokenizer_folder, hide_modules, modules_after_embed
from tests.serve_helpers import (
    lines,
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    tiny_model_folder,
    wait_for,
)

pytestmark = pytest.mark.slow  # `bertlite serve` and fresh interpreters as processes, signals

SERVE_STACK = ("starlette", "uvicorn", "prometheus_client", "fastapi")

# The real CLI in a subprocess, with the worker's forward (Embedder.encode_tokenized) held for every
# request (not the warm-up or /health forward: [CLS] [SEP] only) until the test writes a line to
# stdin: the request stays in flight.
HELD_SERVER = textwrap.dedent(
    """
    import sys
    from bertlite.jobs.embedder import Embedder

    encode_tokenized = Embedder.encode_tokenized

    def held(self, encodings, **kwargs):
        if any(len(e.ids) > 2 for e in encodings):
            print("in forward", flush=True)
            sys.stdin.readline()
        return encode_tokenized(self, encodings, **kwargs)

    Embedder.encode_tokenized = held
    from bertlite.cli import main
    sys.exit(main(["serve", sys.argv[1], "--port", "0", "--grace-period", "60", "--dtype", "float32"]))
    """
)


@pytest.fixture(scope="module")
def tiny_folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_folder(real_model_path, tmp_path_factory.mktemp("tiny"))


def test_sigterm_finishes_the_request_in_flight_and_exits_0(tiny_folder: Path) -> None:
    texts = ["one request in flight", "during the shutdown"]
    expected = Embedder.from_pretrained(tiny_folder, dtype="float32", normalize=True).encode(texts)  # /embed normalizes
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD_SERVER, str(tiny_folder)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = lines(proc.stdout), lines(proc.stderr)
        url = wait_for(stderr, "bertlite serve: ready on ").split("ready on ")[1].strip()
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        result: dict[str, httpx.Response] = {}
        request = threading.Thread(
            target=lambda: result.setdefault("r", httpx.post(f"{url}/embed", json={"inputs": texts}, timeout=120))
        )
        request.start()
        wait_for(stdout, "in forward")
        proc.send_signal(signal.SIGTERM)
        # uvicorn has closed its listening socket when it says it waits for connections.
        wait_for(stderr, "Waiting for connections to close")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health")
        proc.stdin.write("release\n")
        proc.stdin.flush()
        request.join(120)
        assert result["r"].status_code == 200
        assert np.abs(np.asarray(result["r"].json(), dtype=np.float32) - expected).max() <= 1e-6
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_model_that_fails_to_load_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(tmp_path / "missing"), "--port", "0"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1
    assert errors[0].startswith("bertlite serve: error: the model failed to load: ")
    assert str(tmp_path / "missing") in errors[0]


def test_a_damaged_tokenizer_exits_2_naming_the_file(
    real_model_path: Path, tiny_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: exit 2 with tokenizers' message only ("EOF while parsing ..."), no file named.
    folder = damaged_tokenizer_folder(real_model_path, tmp_path / "model", "truncated", weights_from=tiny_folder)
    assert main(["serve", str(folder), "--port", "0"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1
    assert f"{folder / 'tokenizer.json'}: not a valid tokenizer.json (EOF while parsing" in errors[0]


def test_usage_errors_exit_2(tiny_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(tiny_folder), "--port", str(port)]) == 2
    assert f"bertlite serve: error: cannot listen on 127.0.0.1:{port}: " in capsys.readouterr().err
    for flags, message in [
        (["--port", "70000"], "--port must be between 0 and 65535, got 70000"),
        (["--max-client-batch-size", "0"], "--max-client-batch-size must be >= 1, got 0"),
        (["--max-input-length", "1"], "--max-input-length must be >= 2"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
    ]:
        assert main(["serve", str(tiny_folder), *flags]) == 2
        assert f"bertlite serve: error: {message}" in capsys.readouterr().err


def test_without_the_serve_extra_the_error_says_what_to_install(
    tiny_folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide_modules(monkeypatch, "uvicorn")
    monkeypatch.delitem(sys.modules, "bertlite.serve.server", raising=False)
    assert main(["serve", str(tiny_folder), "--port", "0"]) == 2
    assert "pip install 'bertlite[serve]'" in capsys.readouterr().err


def test_import_and_embed_never_import_the_server_stack(real_model_path: Path, tmp_path: Path) -> None:
    imports = "bertlite, bertlite.cli, bertlite.serve, bertlite.cli.serve"
    assert modules_after_embed(real_model_path, tmp_path, imports, SERVE_STACK) == []
