"""`bertlite embed --device cuda` and `bertlite serve --device cuda` give the CPU's float32 vectors
within the half dtype's error. Run where CUDA is present; skipped elsewhere (tests/jobs/test_prepare.py
checks the device dispatch on any machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertlite.cli import main
from bertlite.jobs.embedder import Embedder
from tests.helpers import ROOT
from tests.serve_helpers import lines, wait_for

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"), pytest.mark.slow]


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def test_embed_on_cuda_gives_the_cpus_vectors(real_model_path: Path, corpus_texts: list[str], tmp_path: Path) -> None:
    texts = [t for t in corpus_texts if "\n" not in t][:300]
    expected = Embedder.from_pretrained(real_model_path, dtype="float32").encode(texts)
    source, out = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    assert main(["embed", str(real_model_path), "-i", str(source), "-o", str(out), "--quiet", "--device", "cuda"]) == 0
    assert _min_cosine(np.load(out), expected) >= 0.9999


def test_serve_on_cuda_answers_with_the_cpus_vectors(real_model_path: Path, corpus_texts: list[str]) -> None:
    import httpx

    texts = corpus_texts[:20]
    expected = Embedder.from_pretrained(real_model_path, dtype="float32", normalize=True).encode(texts)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    command = [sys.executable, "-m", "bertlite.cli", "serve", str(real_model_path), "--port", "0", "--device", "cuda"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = wait_for(lines(proc.stderr), "bertlite serve: ready on ").split("ready on ")[1].strip()
        response = httpx.post(f"{url}/embed", json={"inputs": texts}, timeout=120)
        assert response.status_code == 200
        assert _min_cosine(np.asarray(response.json(), dtype=np.float32), expected) >= 0.9999
    finally:
        proc.terminate()
        proc.wait(timeout=60)
