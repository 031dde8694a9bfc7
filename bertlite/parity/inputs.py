"""Parity's inputs: the built-in texts, a text file's texts, and the padded batches both models run."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from bertlite.config import BertConfig
from bertlite.errors import CheckpointError, ParityLoadError
from bertlite.tokenization import load_tokenizer

# Varied on purpose: short, long, two segments (token_type_ids), non-ASCII, and
# lengths that force padding in every batch.
BUILTIN_TEXTS: list[str | tuple[str, str]] = [
    "Hello world.",
    "a",
    "Return the absolute value of a number. The argument may be an integer, a floating point number, or an "
    "object implementing __abs__(). If the argument is a complex number, its magnitude is returned.",
    ("What does len() return?", "Return the length (the number of items) of an object."),
    ("Is this a pair?", "Yes: the second segment gets token_type_id 1."),
    "Zürich, São Paulo, Kraków and Ålesund are cities; naïve café crème brûlée.",
    "東京は日本の首都です。",
    "Привет, мир! Это проверка.",
    "emoji 🙂 and symbols ∑ ∫ √ ≠ ≤ ≥ ← →",
    "   leading and trailing spaces   ",
    "UPPER CASE and lower case and MiXeD CaSe",
    "numbers 3.14159 2.71828 1e-12 0x1F 1,000,000",
    "def f(x):\n    return x ** 2  # code with newlines and indentation",
    "https://example.org/path?query=1&other=two#fragment",
    " ".join(["This sentence is repeated to build a long input."] * 30),
    ("A long second segment follows.", " ".join(["Padding matters for the shorter rows in this batch."] * 12)),
    "The quick brown fox jumps over the lazy dog.",
    "Tabs\tand\tother\twhitespace.",
]


def read_text_file(path: str | os.PathLike) -> list[str | tuple[str, str]]:
    """Read parity's texts: one per line; a tab splits a line into a (text_a, text_b) pair.

    Args:
        path: a UTF-8 text file.

    Returns:
        The non-empty lines, as texts or pairs.

    Raises:
        ParityLoadError: the file cannot be read or has no non-empty lines.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise ParityLoadError(f"cannot read --text-file {path}: {e}") from e
    texts = [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines if line.strip()]
    if not texts:
        raise ParityLoadError(f"--text-file {path} has no non-empty lines")
    return texts


def make_batches(
    name_or_path: str,
    texts: list[str | tuple[str, str]],
    config: BertConfig,
    batch_size: int,
    max_length: int,
    hub_kwargs: dict[str, Any],
    notes: list[str],
) -> list[dict[str, Tensor]]:
    """Tokenize the texts into padded batches with transformers' tokenizer of the checkpoint.

    Without a tokenizer, random ids with the texts' word counts as lengths, so weights-only
    checkpoints can still be checked (and a note says so).

    Args:
        name_or_path: the checkpoint.
        texts: texts or (text_a, text_b) pairs.
        config: its config (vocab_size, for the random ids).
        batch_size: texts per batch.
        max_length: tokens per text, longer ones truncated.
        hub_kwargs: hub options for the tokenizer.
        notes: the report's notes, appended to.

    Returns:
        Batches of input_ids, attention_mask (and token_type_ids where the tokenizer gives them), (B, T).

    Raises:
        ParityLoadError: a tokenizer.json or vocab.txt that cannot be read as one.
    """
    tokenizer = _reference_tokenizer(name_or_path, hub_kwargs)
    batches = []
    g = torch.Generator().manual_seed(0)
    for i in range(0, len(texts), batch_size):
        chunk = texts[i : i + batch_size]
        if tokenizer is not None:
            batches.append(_tokenized_batch(tokenizer, chunk, max_length))
        else:
            batches.append(_random_batch(chunk, config.vocab_size, max_length, g))
    if tokenizer is None:
        notes.append("no tokenizer found: random token ids with the texts' word counts as lengths")
    return batches


def _reference_tokenizer(name_or_path: str, hub_kwargs: dict[str, Any]) -> Any | None:
    """Load transformers' tokenizer of the checkpoint, after bertlite's reader has checked its files.

    Args:
        name_or_path: the checkpoint.
        hub_kwargs: hub options for the tokenizer.

    Returns:
        transformers' AutoTokenizer, or None when the checkpoint has no tokenizer.

    Raises:
        ParityLoadError: a tokenizer.json or vocab.txt that cannot be read as one.
    """
    import transformers

    try:
        # bertlite's reader first: a damaged tokenizer file is an error naming it, where transformers
        # would print a traceback (or be taken for "no tokenizer" below).
        load_tokenizer(name_or_path, **hub_kwargs)
    except CheckpointError as e:
        raise ParityLoadError(f"cannot load the tokenizer of {name_or_path}: {e}") from e
    except (OSError, ValueError):
        pass  # no tokenizer files: random ids, as below
    try:
        return transformers.AutoTokenizer.from_pretrained(name_or_path, **hub_kwargs)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _tokenized_batch(tokenizer: Any, chunk: list[str | tuple[str, str]], max_length: int) -> dict[str, Tensor]:
    """Tokenize one batch of texts or pairs, padded to its longest.

    Args:
        tokenizer: transformers' tokenizer.
        chunk: the batch's texts or (text_a, text_b) pairs.
        max_length: tokens per text, longer ones truncated.

    Returns:
        input_ids, attention_mask (and token_type_ids where the tokenizer gives them), (B, T).
    """
    firsts = [t[0] if isinstance(t, tuple) else t for t in chunk]
    seconds = [t[1] if isinstance(t, tuple) else None for t in chunk]
    pairs = [(a, b) if b is not None else a for a, b in zip(firsts, seconds, strict=True)]
    enc = tokenizer(pairs, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}


def _random_batch(
    chunk: list[str | tuple[str, str]], vocab_size: int, max_length: int, generator: torch.Generator
) -> dict[str, Tensor]:
    """Random token ids for one batch, each text as long as its word count (plus [CLS] and [SEP]).

    Args:
        chunk: the batch's texts or pairs.
        vocab_size: the ids' range (0, the padding id, only at padded positions).
        max_length: tokens per text at most.
        generator: the seeded generator the batches share.

    Returns:
        input_ids and attention_mask, (B, T).
    """
    lengths = [min(max_length, 2 + len(str(t).split())) for t in chunk]
    seq = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (seq - n) for n in lengths])
    ids = torch.randint(1, vocab_size, (len(chunk), seq), generator=generator).masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask}
