"""How a chunk of texts becomes forwards: length-sorted batches, packed token rows on a grid of a few shapes,
and heads run on whole row blocks, so a text's numbers do not depend on what shares its batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import Tensor


def concatenated(rows: list[list[int]], filler: int, fill: int) -> Tensor:
    """The rows one after another, then `filler` copies of `fill`, as an int64 tensor (through numpy: a
    Python list of every token costs several times as much on large batches)."""
    parts = [np.asarray(row, dtype=np.int64) for row in rows]
    return torch.from_numpy(np.concatenate([*parts, np.full(filler, fill, dtype=np.int64)]))


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor on `device`: on CUDA copied from pinned memory without waiting, so the host goes on
    to the next batch while the GPU runs this one."""
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def shape_tokens(tokens: int) -> int:
    """The token count a packed forward of `tokens` tokens runs at: a multiple of 8 up to 64, then one of
    8 steps per doubling (at most 1/8 more).

    oneDNN (the Linear layers' GEMMs) builds and caches kernels for every row count it meets, about
    2.4 MB each for MiniLM-L6: a server's batches, each of a new total, grew its memory without end.
    On this grid there are 8 shapes per doubling, so the caches, and the process, level off.

    Args:
        tokens: the batch's real tokens.

    Returns:
        The padded count, >= tokens.
    """
    step = 8 if tokens <= 64 else 1 << (tokens.bit_length() - 4)
    return -(-tokens // step) * step


HEAD_ROWS_MULTIPLE = 8  # a head's GEMM runs on a multiple of this many rows (see on_whole_blocks)


def on_whole_blocks(head: Callable[[Tensor], Tensor], rows: Tensor) -> Tensor:
    """`head` (row by row: Linears, activations, LayerNorms) on `rows` brought up to a multiple of
    HEAD_ROWS_MULTIPLE rows with zero rows, and its output cut back to the rows given.

    A GEMM rounds a row alike whatever else is in the batch only on a row count that fills its kernel's
    blocks: measured on Zen 4, MKL's float32 GEMM (F.linear) gives other bits for the rows of a count of
    2, 3 or 5 than for the same rows among 8, and oneDNN's for 1 row than for 2 or more; on any multiple of 8,
    at any row offset and thread count, both give the same bits. A head over a batch's rows (their count
    depends on what shares the batch) so gives each text the result it has alone, for at most 7 rows more.

    Args:
        head: maps (N, ...) rows to (N, ...) rows, each from its own row only.
        rows: (N, ...) the rows.

    Returns:
        head(rows), (N, ...).
    """
    count = rows.shape[0]
    whole = max(HEAD_ROWS_MULTIPLE, -(-count // HEAD_ROWS_MULTIPLE) * HEAD_ROWS_MULTIPLE)
    if whole == count:
        return head(rows)
    return head(torch.cat([rows, rows.new_zeros(whole - count, *rows.shape[1:])]))[:count]


def sorted_batches(
    order: list[int], lengths: list[int], batch_size: int, max_tokens: int | None
) -> Iterator[list[int]]:
    """Consecutive runs of `order` (longest first) within batch_size and the token budget."""
    batch: list[int] = []
    for i in order:
        # The first text of a batch is its longest, so it sets the padded width.
        width = lengths[batch[0]] if batch else lengths[i]
        if batch and (len(batch) == batch_size or (max_tokens and (len(batch) + 1) * width > max_tokens)):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
