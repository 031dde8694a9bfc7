"""One cold start in this fresh process: import a library, load the model, embed one sentence.

`python -m bench.cold_child LIBRARY MODEL` (run by bench.cold_start) prints one JSON line: import_s,
from_pretrained_s, first_vector_s (all three steps) and peak_rss_mib. Imports nothing else first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

T0 = time.perf_counter()
SENTENCE = "The first sentence of the day."


def bertlite_model(path: str) -> tuple[float, float, Any]:
    """BertModel fp32 and an Embedder around it, as before Embedder.from_pretrained existed."""
    from bertlite import BertModel
    from bertlite.jobs.embedder import Embedder
    from bertlite.tokenization import load_tokenizer

    t1 = time.perf_counter()
    model = BertModel.from_pretrained(path)
    t2 = time.perf_counter()
    embedder = Embedder(model, load_tokenizer(path), pooling="mean", normalize=True, max_length=256)
    return t1, t2, embedder.encode([SENTENCE])


def bertlite_embedder_auto(path: str) -> tuple[float, float, Any]:
    """Embedder's defaults, as a user starts it: dtype="auto" (bf16 where native: the conversion counts)."""
    from bertlite import Embedder

    t1 = time.perf_counter()
    embedder = Embedder.from_pretrained(path)
    t2 = time.perf_counter()
    return t1, t2, embedder.encode([SENTENCE])


def transformers_model(path: str) -> tuple[float, float, Any]:
    """AutoModel + AutoTokenizer, mean pooling over the one sentence."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    t1 = time.perf_counter()
    model = AutoModel.from_pretrained(path).eval()
    t2 = time.perf_counter()
    batch = AutoTokenizer.from_pretrained(path)([SENTENCE], return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    return t1, t2, torch.nn.functional.normalize(hidden.mean(1), dim=-1).numpy()


LIBRARIES: dict[str, Callable[[str], tuple[float, float, Any]]] = {
    "bertlite": bertlite_model,
    "bertlite_embedder_auto": bertlite_embedder_auto,
    "transformers": transformers_model,
}


def main(library: str, path: str) -> None:
    """Run one library's cold start and print its times (from T0) and this process's peak RSS."""
    t1, t2, vector = LIBRARIES[library](path)
    t3 = time.perf_counter()
    assert vector.shape[-1] > 0
    # VmHWM, not ru_maxrss: the latter survives exec, so a child would report its parent's peak.
    with open("/proc/self/status", encoding="ascii") as f:
        hwm = next(line for line in f if line.startswith("VmHWM:"))
    print(
        json.dumps(
            {
                "import_s": t1 - T0,
                "from_pretrained_s": t2 - t1,
                "first_vector_s": t3 - T0,
                "peak_rss_mib": int(hwm.split()[1]) / 1024,
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
