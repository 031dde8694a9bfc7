"""transformers' AutoTokenizer + AutoModel, as its users write it: padded batches of 32, mean pooling."""

from __future__ import annotations

import numpy as np
import torch

from bench.runners import BATCH_SIZE, MAX_LENGTH, Runner


def mean_normalize(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens of (B, T, H) hidden states, L2-normalized: (B, H) float32."""
    m = mask.unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden.float() * m).sum(1) / m.sum(1), dim=-1)


def transformers_runner(model_path: str, attn: str, dtype: torch.dtype, sort: bool) -> Runner:
    """transformers' BertModel on batches of 32.

    Args:
        model_path: the checkpoint folder.
        attn: transformers' attn_implementation ("eager", "sdpa").
        dtype: the model's dtype.
        sort: batch the texts sorted by token count (as sentence-transformers does by characters), else in
            corpus order.

    Returns:
        The runner.
    """
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    model = transformers.AutoModel.from_pretrained(model_path, attn_implementation=attn, dtype=dtype).eval()

    def run(texts: list[str]) -> np.ndarray:
        order = list(range(len(texts)))
        if sort:
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]]
            order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), BATCH_SIZE):
                rows = order[start : start + BATCH_SIZE]
                batch = tokenizer(
                    [texts[i] for i in rows], padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
                )
                out[rows] = mean_normalize(model(**batch).last_hidden_state, batch["attention_mask"]).numpy()
        return out

    return run
