"""The packed layout: the real tokens of a batch concatenated into one (total_tokens, H) matrix.

Every Linear, LayerNorm and activation runs on the packed matrix, so no FLOP is spent on
padding; attention is the one step that needs sequences apart (bertlite.layers.attention), and
pooling reads each sequence's rows. A padded (B, T) batch and a packed one are two views
of the same tokens: `scatter_to_grid` / `gather_from_grid` move between them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

import torch
from torch import Tensor


@dataclass
class PackedLayout:
    """Where each sequence's tokens sit in the packed matrix and in a padded (B, T) grid."""

    lengths: Tensor  # (B,) real tokens per sequence
    starts: Tensor  # (B,) offset of each sequence in the packed matrix
    max_length: int  # T
    padded_index: Tensor  # (N,) packed row -> row of the (B * T) padded grid
    attention_bias: Tensor | None  # (B, 1, 1, T): 0 / dtype-min for padded keys; None if no padding
    sequence_index: Tensor  # (N,) packed row -> sequence number
    positions: Tensor  # (N,) position of each packed row in its sequence: 0, 1, ...
    padding_index: Tensor  # rows of the (B * T) padded grid that hold no token
    cu_seqlens: Tensor  # (B + 1,) int32: where each sequence starts, then the total (varlen attention's form)

    @classmethod
    def from_lengths(
        cls, lengths: Tensor, dtype: torch.dtype = torch.float32, device: torch.device | None = None
    ) -> PackedLayout:
        """Build the layout of sequences of these lengths, packed one after another.

        Args:
            lengths: (B,) real tokens per sequence.
            dtype: the attention bias's dtype (the model's).
            device: where the layout's tensors go; None: lengths' device. From CPU lengths to a GPU the
                layout is built on the CPU and copied once, asynchronously: no step waits for the GPU.

        Returns:
            The PackedLayout.
        """
        if device is not None and torch.device(device).type != lengths.device.type:
            return cls.from_lengths(lengths.cpu(), dtype).to(device)
        lengths = lengths.to(torch.long)
        batch, width = len(lengths), int(lengths.max())
        ends = torch.cumsum(lengths, 0)
        starts = ends - lengths
        sequence_index = torch.repeat_interleave(torch.arange(batch, device=lengths.device), lengths)
        offset_in_sequence = torch.arange(int(lengths.sum()), device=lengths.device) - starts[sequence_index]
        padded_index = sequence_index * width + offset_in_sequence
        keep = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]  # (B, T)
        padding_index = (~keep).view(-1).nonzero().view(-1)
        bias = None
        if len(padding_index):
            bias = torch.zeros(batch, 1, 1, width, dtype=dtype, device=lengths.device)
            bias.masked_fill_(~keep[:, None, None, :], torch.finfo(dtype).min)
        cu_seqlens = torch.cat([ends.new_zeros(1), ends]).to(torch.int32)
        return cls(
            lengths, starts, width, padded_index, bias, sequence_index, offset_in_sequence, padding_index, cu_seqlens
        )

    def to(self, device: torch.device | str) -> PackedLayout:
        """This layout on `device`, copied from pinned memory without waiting (`runs` kept, read on the host)."""
        pinned = torch.device(device).type == "cuda"
        moved = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, Tensor):
                value = (value.pin_memory() if pinned else value).to(device, non_blocking=pinned)
            moved[field.name] = value
        layout = type(self)(**moved)
        layout.__dict__["runs"] = self.runs  # from the host's lengths: no device read later
        return layout

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
    def runs(self) -> list[tuple[int, int, int]]:
        """Runs of consecutive sequences of equal length, as (first row, sequences, length).

        A run's rows are one (sequences, length) block of the packed matrix, a grid with no padding.
        """
        runs: list[tuple[int, int, int]] = []
        row = 0
        for length in self.lengths.tolist():
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
