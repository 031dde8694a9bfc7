"""`bertlite serve`'s options as the command resolves them, without serving: the API key (never
silently empty, stripped as the client's is), the served model name, the warning for an exposed
server without a key, and one-line usage errors for every limit and timeout."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from bertlite.cli import main
from bertlite.serve import server as server_module
from tests.serve_helpers import tiny_model_folder


@pytest.fixture(scope="module")
def tiny_folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_folder(real_model_path, tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `bertlite serve` would run (the app's service, the uvicorn server), recorded instead of served;
    and every address binds 127.0.0.1."""
    seen: dict[str, Any] = {}
    bind = server_module.bind

    def record(server: Any, sock: socket.socket) -> None:
        seen["service"], seen["server"] = server.config.app.state.service, server
        sock.close()

    monkeypatch.setattr(server_module, "run", record)
    monkeypatch.setattr(server_module, "bind", lambda host, port: bind("127.0.0.1", port))
    monkeypatch.delenv("BERTLITE_API_KEY", raising=False)
    return seen


def serve(folder: Path, *flags: str) -> int:
    return main(["serve", str(folder), "--port", "0", *flags])


def test_an_empty_key_is_a_usage_error_not_a_server_without_one(
    tiny_folder: Path, served: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert serve(tiny_folder, "--api-key", "") == 2
    assert "bertlite serve: error: --api-key is empty, which would turn the key check off" in capsys.readouterr().err
    (tmp_path / "blank").write_text("\n")
    assert serve(tiny_folder, "--api-key-file", str(tmp_path / "blank")) == 2
    assert f"error: --api-key-file {tmp_path / 'blank'} is empty" in capsys.readouterr().err
    assert serve(tiny_folder, "--api-key-file", str(tmp_path / "missing")) == 2
    assert "cannot read it (No such file or directory)" in capsys.readouterr().err
    monkeypatch.setenv("BERTLITE_API_KEY", "")
    assert serve(tiny_folder) == 2
    assert "bertlite serve: error: env BERTLITE_API_KEY is empty" in capsys.readouterr().err
    assert "service" not in served


def test_keys_are_stripped_as_the_clients_key_is(
    tiny_folder: Path, served: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "key").write_text("sk-from-file\n")
    assert serve(tiny_folder, "--api-key-file", str(tmp_path / "key")) == 0
    assert served["service"].api_key == "sk-from-file"
    monkeypatch.setenv("BERTLITE_API_KEY", " sk-from-env\n")
    assert serve(tiny_folder) == 0
    assert served["service"].api_key == "sk-from-env"


def test_the_served_name_is_not_the_servers_path(tiny_folder: Path, served: dict) -> None:
    assert serve(tiny_folder) == 0
    assert served["service"].model_name == tiny_folder.name
    assert str(tiny_folder.parent) not in served["service"].model_name
    assert serve(tiny_folder, "--served-model-name", "minilm") == 0
    assert served["service"].model_name == "minilm"


def test_an_exposed_host_without_a_key_is_warned_about(
    tiny_folder: Path, served: dict, capsys: pytest.CaptureFixture
) -> None:
    assert serve(tiny_folder, "--host", "0.0.0.0") == 0
    assert (
        "bertlite serve: warning: listening on 0.0.0.0 without an API key: anyone who can reach this port "
        "can use the model" in capsys.readouterr().err
    )
    for flags in (["--host", "0.0.0.0", "--api-key", "sk-x"], ["--host", "127.0.0.1"], ["--host", "localhost"]):
        assert serve(tiny_folder, *flags) == 0
        assert "warning" not in capsys.readouterr().err


def test_limits_and_timeouts_reach_the_server(tiny_folder: Path, served: dict) -> None:
    flags = ["--max-connections", "64", "--max-header-bytes", "4096", "--header-timeout", "3"]
    flags += [
        "--keep-alive-timeout",
        "7",
        "--body-timeout",
        "9",
        "--max-input-bytes",
        "1000",
        "--max-body-bytes",
        "5000",
    ]
    assert serve(tiny_folder, *flags) == 0
    protocol = served["server"].config.http.keywords["limits"]
    assert (protocol.max_connections, protocol.max_header_bytes, protocol.header_timeout) == (64, 4096, 3.0)
    assert served["server"].config.timeout_keep_alive == 7.0
    limits = served["service"].limits
    assert (limits.body_timeout, limits.max_input_bytes, limits.max_body_bytes) == (9.0, 1000, 5000)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grace-period", "nan"], "--grace-period must be a number of seconds from 0 to 86400, got nan"),
        (["--grace-period", "inf"], "--grace-period must be a number of seconds from 0 to 86400, got inf"),
        (["--grace-period", "1e300"], "--grace-period must be a number of seconds from 0 to 86400, got 1e+300"),
        (["--grace-period", "-1"], "--grace-period must be a number of seconds from 0 to 86400, got -1.0"),
        (["--header-timeout", "0"], "--header-timeout must be a number of seconds from 0.001 to 86400, got 0.0"),
        (["--body-timeout", "nan"], "--body-timeout must be a number of seconds from 0.001 to 86400, got nan"),
        (
            ["--keep-alive-timeout", "inf"],
            "--keep-alive-timeout must be a number of seconds from 0.001 to 86400, got inf",
        ),
        (["--max-connections", "0"], "--max-connections must be >= 1, got 0"),
        (["--max-header-bytes", "100"], "--max-header-bytes must be >= 1024, got 100"),
        (["--max-input-bytes", "0"], "--max-input-bytes must be >= 1, got 0"),
        (["--max-body-bytes", "0"], "--max-body-bytes must be >= 1, got 0"),
    ],
)
def test_out_of_range_limits_are_one_line_usage_errors(
    tiny_folder: Path, served: dict, capsys: pytest.CaptureFixture, flags: list[str], message: str
) -> None:
    assert serve(tiny_folder, *flags) == 2
    err = capsys.readouterr().err
    assert err == f"bertlite serve: error: {message}\n"
    assert "service" not in served


def test_max_connections_must_fit_under_ulimit(
    tiny_folder: Path, served: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(server_module, "fd_limit", lambda: 1024)
    assert serve(tiny_folder, "--max-connections", "5000") == 2
    assert (
        "bertlite serve: error: --max-connections must leave 128 of the 1024 file descriptors `ulimit -n` allows "
        "for the model and the server, got 5000" in capsys.readouterr().err
    )
    assert serve(tiny_folder) == 0  # the default fits
    assert served["server"].config.http.keywords["limits"].max_connections == 1024 - 128
