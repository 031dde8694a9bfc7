"""A long run of batches of ever-new token counts (a server's) keeps its memory flat."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from bertlite.jobs.embedder import shape_tokens
from tests.helpers import run_fresh_without_isa_caps


def test_shape_grid_has_few_sizes_and_at_most_an_eighth_more() -> None:
    sizes = {shape_tokens(n) for n in range(1, 16385)}
    assert len(sizes) <= 72
    assert all(n <= shape_tokens(n) <= max(n + 7, n * 9 // 8) for n in range(1, 16385))


@pytest.mark.slow
def test_forwards_run_on_the_grid_with_the_same_vectors(real_model_path: Path) -> None:
    from bertlite.jobs.embedder import Embedder

    embedder = Embedder.from_pretrained(real_model_path, dtype="float32")
    rows: list[int] = []
    embedder.model.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append(len(kwargs["input_ids"])), with_kwargs=True
    )
    rng = random.Random(0)
    texts = [" ".join(["word"] * rng.randint(1, 60)) for _ in range(40)]
    together = embedder.encode_tokenized(embedder.tokenize(texts), batch_size=len(texts))
    alone = np.concatenate([embedder.encode_tokenized(embedder.tokenize([t])) for t in texts])
    assert rows and all(n == shape_tokens(n) for n in rows)  # the fillers brought every forward onto the grid
    np.testing.assert_allclose(together, alone, atol=2e-6)


# Warms up on one batch per grid size up to 512 tokens, then runs 150 batches of random token
# counts (2-8 texts); prints the RSS growth over those in MiB.
_GROWTH_SCRIPT = """
import random, sys
import torch
from bertlite.jobs.embedder import Embedder, shape_tokens

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

torch.set_num_threads(1)
embedder = Embedder.from_pretrained(sys.argv[1], dtype="float32")
run = lambda texts: embedder.encode_tokenized(embedder.tokenize(texts), batch_size=len(texts))
for size in sorted({shape_tokens(n) for n in range(8, 513)}):
    run(["a " * (size // 2 - 2), "a " * (size - size // 2 - 2)])
rng = random.Random(0)
batches = [["a " * rng.randint(1, 60) for _ in range(rng.randint(2, 8))] for _ in range(150)]
run(batches[0])
before = rss()
for texts in batches:
    run(texts)
print(rss() - before)
"""


@pytest.mark.slow
def test_rss_stays_flat_over_batches_of_new_token_counts(real_model_path: Path) -> None:
    # Before the grid, each new token count cost about 2.4 MB that stayed (oneDNN's kernels per row count).
    result = run_fresh_without_isa_caps(["-c", _GROWTH_SCRIPT, str(real_model_path)], timeout=600)
    growth = float(result.stdout.split()[-1])
    assert growth < 40, f"RSS grew {growth:.0f} MiB over 150 batches"
