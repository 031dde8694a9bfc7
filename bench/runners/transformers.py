"""transformers' AutoTokenizer + AutoModel, as its users write it: padded batches of 32, mean pooling."""

from __future__ import annotations

import numpy as np
import torch

from bench.runners import BATCH_SIZE, MAX_LENGTH, Runner


def mean_normalize(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens of (B, T, H) hidden states, L2-normalized: (B, H) float32."""
    m = mask.unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden.float() * m).sum(1) / m.sum(1), dim=-1)


def from_pretrained_dtype_keyword() -> str:
    """The dtype keyword of transformers' from_pretrained: `dtype` since 4.56 (`torch_dtype` warns there, and is
    what older versions take). sentence-transformers hands model_kwargs to it unchanged."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def transformers_runner(
    model_path: str,
    attn: str,
    dtype: torch.dtype,
    sort: bool,
    device: torch.device | str = "cpu",
    batch_size: int = BATCH_SIZE,
) -> Runner:
    """transformers' AutoModel on padded batches, mean pooling and L2 normalization in torch on the device, the
    vectors copied to the host once at the end.

    Args:
        model_path: the checkpoint folder.
        attn: transformers' attn_implementation ("eager", "sdpa").
        dtype: the model's dtype.
        sort: batch the texts sorted by token count (as sentence-transformers does by characters), else in
            corpus order.
        device: where the model runs.
        batch_size: texts per batch.

    Returns:
        The runner.
    """
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    model = transformers.AutoModel.from_pretrained(
        model_path, attn_implementation=attn, **{from_pretrained_dtype_keyword(): dtype}
    )
    model = model.to(device).eval()

    def run(texts: list[str]) -> np.ndarray:
        order = list(range(len(texts)))
        if sort:
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]]
            order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        pooled = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                batch = tokenizer(
                    [texts[i] for i in rows], padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
                ).to(device)
                pooled.append(mean_normalize(model(**batch).last_hidden_state, batch["attention_mask"]))
            vectors = torch.empty(len(texts), model.config.hidden_size, device=device)
            vectors[torch.tensor(order, device=device)] = torch.cat(pooled)
        return vectors.cpu().numpy()

    return run
