"""What the family tests (GTE, NomicBERT, EuroBERT, DeBERTa-v2, ModernBERT) share: packing a padded batch, a
folder's saved keys and a model's keys as it saves them, a head's labels and a sentence-transformers folder around a
saved model."""

from __future__ import annotations

from pathlib import Path

import torch


def packed(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The padded batch's real tokens (and their types, where it has them), concatenated, and their lengths."""
    real = batch["attention_mask"].bool()
    out = {"input_ids": batch["input_ids"][real], "lengths": real.sum(dim=1)}
    if "token_type_ids" in batch:
        out["token_type_ids"] = batch["token_type_ids"][real]
    return out


def saved_keys(folder: Path) -> list[str]:
    """The keys of a folder's model.safetensors, sorted."""
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as f:
        return sorted(f.keys())


def keys_as_saved(model: torch.nn.Module) -> list[str]:
    """The keys a bertlite model's save_pretrained writes (tied targets once, fused Linears fused), sorted."""
    from bertlite.checkpoint.save import tensors_to_save

    return sorted(tensors_to_save(model))


def head_labels(head: str, batch: dict[str, torch.Tensor], num_labels: int) -> dict[str, torch.Tensor]:
    """Labels for a head's loss: class ids per text, or per token with -100 on the padding."""
    g = torch.Generator().manual_seed(3)
    b, t = batch["input_ids"].shape
    if head == "ForSequenceClassification":
        return {"labels": torch.randint(0, num_labels, (b,), generator=g)}
    labels = torch.randint(0, num_labels, (b, t), generator=g)
    return {"labels": labels.masked_fill(~batch["attention_mask"].bool(), -100)}


def save_st_folder(folder: Path, path: Path, pooling: str, hidden_size: int = 32, max_seq_length: int = 24) -> Path:
    """A sentence-transformers folder of the model in `folder`: Transformer, `pooling`, Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    modules = [Transformer(str(folder), max_seq_length=max_seq_length), Pooling(hidden_size, pooling), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(path))
    return path
