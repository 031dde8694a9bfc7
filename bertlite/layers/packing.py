"""The packed layout: the real tokens of a batch concatenated into one (total_tokens, H) matrix.

Every Linear, LayerNorm and activation runs on the packed matrix, so no FLOP is spent on
padding; attention is the one step that needs sequences apart (bertlite.layers.attention), and
pooling reads each sequence's rows. A padded (B, T) batch and a packed one are two views
of the same tokens: `scatter_to_grid` / `gather_from_grid` move between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor


@dataclass
class PackedLayout:
    """Where each sequence's tokens sit in the packed matrix and in a padded (B, T) grid.

    What the packed path reads on every layer is built at once; what only the padded grid needs
    (padded_index, padding_index, attention_bias) is built on first use, so a GPU batch whose attention
    needs no grid ("varlen") never builds it.
    """

    lengths: Tensor  # (B,) real tokens per sequence
    starts: Tensor  # (B,) offset of each sequence in the packed matrix
    max_length: int  # T
    sequence_index: Tensor  # (N,) packed row -> sequence number
    positions: Tensor  # (N,) position of each packed row in its sequence: 0, 1, ...
    cu_seqlens: Tensor  # (B + 1,) int32: where each sequence starts, then the total (varlen attention's form)
    padded: bool  # whether the grid holds padding (the lengths differ)
    bias_dtype: torch.dtype = torch.float32  # attention_bias's dtype (the model's)
    host_lengths: list[int] | None = None  # the lengths on the host, when they were there: runs reads them

    @classmethod
    def from_lengths(
        cls, lengths: Tensor, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
    ) -> PackedLayout:
        """Build the layout of sequences of these lengths, packed one after another.

        Args:
            lengths: (B,) real tokens per sequence.
            dtype: the attention bias's dtype (the model's).
            device: where the layout's tensors go; None: lengths' device. From host lengths to a GPU, the
                lengths are copied once (from pinned memory, without waiting) and the rest is computed
                there, its sizes known on the host: no step waits for the GPU.

        Returns:
            The PackedLayout.
        """
        lengths = lengths.to(torch.long)
        host = lengths.tolist() if lengths.device.type == "cpu" else None
        if host is not None:
            width, total, padded = max(host), sum(host), min(host) != max(host)
        else:  # lengths already on the device: three reads of it
            width, total, padded = int(lengths.max()), int(lengths.sum()), bool(lengths.min() != lengths.max())
        if device is not None and torch.device(device) != lengths.device:
            pinned = torch.device(device).type == "cuda"
            lengths = (lengths.pin_memory() if pinned else lengths).to(device, non_blocking=pinned)
        ends = torch.cumsum(lengths, 0)
        starts = ends - lengths
        cu_seqlens = torch.cat([ends.new_zeros(1), ends]).to(torch.int32)
        sequences = torch.arange(len(lengths), device=lengths.device)
        sequence_index = torch.repeat_interleave(sequences, lengths, output_size=total)
        positions = torch.arange(total, device=lengths.device) - starts[sequence_index]
        return cls(lengths, starts, width, sequence_index, positions, cu_seqlens, padded, dtype, host)

    @classmethod
    def from_mask(cls, attention_mask: Tensor, dtype: torch.dtype = torch.float32) -> PackedLayout:
        """Build the layout of a right-padded batch: its real tokens are `padded[attention_mask.bool()]`.

        Args:
            attention_mask: (B, T), 1 for real tokens, right-padded.
            dtype: the attention bias's dtype.

        Returns:
            The PackedLayout.
        """
        return cls.from_lengths(attention_mask.sum(dim=1), dtype)

    @property
    def batch_size(self) -> int:
        """The number of sequences B."""
        return len(self.lengths)

    @cached_property
    def padded_index(self) -> Tensor:
        """(N,) packed row -> row of the (B * T) padded grid."""
        return self.sequence_index * self.max_length + self.positions

    @cached_property
    def padding_index(self) -> Tensor:
        """The rows of the (B * T) padded grid that hold no token."""
        return (~self.key_mask).view(-1).nonzero().view(-1)

    @cached_property
    def attention_bias(self) -> Tensor | None:
        """(B, 1, 1, T): 0 for real keys, the dtype's min for padded ones; None when there is no padding."""
        if not self.padded:
            return None
        bias = torch.zeros(self.batch_size, 1, 1, self.max_length, dtype=self.bias_dtype, device=self.lengths.device)
        return bias.masked_fill_(~self.key_mask[:, None, None, :], torch.finfo(self.bias_dtype).min)

    @cached_property
    def runs(self) -> list[tuple[int, int, int]]:
        """Runs of consecutive sequences of equal length, as (first row, sequences, length).

        A run's rows are one (sequences, length) block of the packed matrix, a grid with no padding.
        """
        runs: list[tuple[int, int, int]] = []
        row = 0
        for length in self.host_lengths if self.host_lengths is not None else self.lengths.tolist():
            if runs and runs[-1][2] == length:
                start, count, _ = runs[-1]
                runs[-1] = (start, count + 1, length)
            else:
                runs.append((row, 1, length))
            row += length
        return runs

    @property
    def key_mask(self) -> Tensor:
        """(B, T) bool: True where the padded grid holds a real token."""
        grid = torch.arange(self.max_length, device=self.lengths.device)
        return grid[None, :] < self.lengths[:, None]

    def scatter_to_grid(self, packed: Tensor, fill: float | int = 0) -> Tensor:
        """Scatter packed rows to the padded grid.

        Each grid row is written once: the tokens' rows by copy, the padding's by fill.

        Args:
            packed: (N, ...) packed rows.
            fill: the value in the padding.

        Returns:
            (B, T, ...) padded grid.
        """
        grid = packed.new_empty((self.batch_size * self.max_length, *packed.shape[1:]))
        grid.index_copy_(0, self.padded_index, packed).index_fill_(0, self.padding_index, fill)
        return grid.view(self.batch_size, self.max_length, *packed.shape[1:])

    def gather_from_grid(self, grid: Tensor) -> Tensor:
        """Gather the real tokens' rows from a padded grid, in one gather.

        Args:
            grid: (B, T, ...) padded grid, any strides.

        Returns:
            (N, ...) packed rows.
        """
        return grid[self.sequence_index, self.positions]
