"""Task adapters kept beside the weights they adapt: one Linear or Embedding serves every task, and one batch may
mix tasks.

jina-embeddings-v3 stores, beside each Linear's and Embedding's weight, one low-rank pair per task: lora_A and
lora_B with a leading task dimension. Its code (jinaai/xlm-roberta-flash-implementation, modeling_lora.py) merges
the pair of the task asked for into the weight: a Linear runs W + scaling * B[t] @ A[t] (A (r, in), B (out, r)), an
Embedding W + scaling * A[t] @ B[t] (A (vocab, r), B (r, dim)), scaling = lora_alpha / lora_rank. Here the
low-rank product is added to the output rows of each task instead: no weight is copied, and a row whose task is -1
gets the plain weight, as the original's calls without a task.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# The task of a row with no adapter.
NO_TASK = -1


def add_task_deltas(out: Tensor, inputs: Tensor, tasks: Tensor, delta: Callable[[Tensor, int], Tensor]) -> Tensor:
    """`out` with each task's low-rank delta added to its rows.

    Args:
        out: (..., features) the plain layer's output.
        inputs: the layer's input, whose leading dims are out's (a Linear's (..., in), an Embedding's ids (...)).
        tasks: each row's task index, broadcast to out's leading dims ((B, 1) for a padded batch, (N,) packed);
            NO_TASK: none.
        delta: (the rows' inputs, task) -> those rows' delta.

    Returns:
        out's shape.
    """
    lead = out.shape[:-1]
    flat_tasks = tasks.expand(lead).reshape(-1)
    flat_inputs = inputs.reshape(flat_tasks.numel(), *inputs.shape[len(lead) :])
    flat_out = out.reshape(-1, out.shape[-1])
    for task in flat_tasks.unique().tolist():
        if task == NO_TASK:
            continue
        rows = (flat_tasks == task).nonzero().squeeze(1)
        flat_out = flat_out.index_add(0, rows, delta(flat_inputs[rows], task).to(flat_out.dtype))
    return flat_out.view(out.shape)


class LoRALinear(nn.Linear):
    """An nn.Linear with one low-rank adapter per task: x @ W.T + b, plus scaling * (x @ A[t].T) @ B[t].T on the
    rows of task t."""

    # Without a task it is its nn.Linear: layers.fused runs its weight as the reference's blocks.
    runs_as_linear = True

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, num_tasks: int, rank: int, alpha: float
    ) -> None:
        """Build the Linear and its adapters (lora_A (tasks, rank, in), lora_B (tasks, out, rank)).

        Args:
            in_features, out_features, bias: as nn.Linear's.
            num_tasks: the adapters.
            rank: their rank.
            alpha: their alpha; each adds alpha / rank times its product.
        """
        super().__init__(in_features, out_features, bias)
        self.lora_A = nn.Parameter(torch.empty(num_tasks, rank, in_features))
        self.lora_B = nn.Parameter(torch.empty(num_tasks, out_features, rank))
        self.scaling = alpha / rank
        self.reset_adapters()

    def reset_adapters(self) -> None:
        """The original's init: A kaiming-uniform, B zeros, so a new adapter changes nothing."""
        if self.lora_A.is_meta:
            return
        with torch.no_grad():
            for a in self.lora_A:
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
            self.lora_B.zero_()

    def forward(self, x: Tensor, tasks: Tensor | None = None) -> Tensor:
        """(..., in) -> (..., out); tasks: each row's task (add_task_deltas), None: the plain Linear."""
        return self.add_adapters(F.linear(x, self.weight, self.bias), x, tasks)

    def add_adapters(self, out: Tensor, x: Tensor, tasks: Tensor | None) -> Tensor:
        """The plain output `out` of x with each row's task adapter added; tasks None: out as it is."""
        if tasks is None:
            return out
        return add_task_deltas(out, x, tasks, self._delta)

    def _delta(self, rows: Tensor, task: int) -> Tensor:
        return F.linear(F.linear(rows, self.lora_A[task]), self.lora_B[task]) * self.scaling

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tasks={self.lora_A.shape[0]}, rank={self.lora_A.shape[1]}"


class LoRAEmbedding(nn.Embedding):
    """An nn.Embedding with one low-rank adapter per task: row i of W, plus scaling * A[t][i] @ B[t] for the
    tokens of task t."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        *,
        num_tasks: int,
        rank: int,
        alpha: float,
    ) -> None:
        """Build the Embedding and its adapters (lora_A (tasks, num_embeddings, rank), lora_B (tasks, rank, dim)).

        Args:
            num_embeddings, embedding_dim, padding_idx: as nn.Embedding's.
            num_tasks, rank, alpha: as LoRALinear's.
        """
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.lora_A = nn.Parameter(torch.empty(num_tasks, num_embeddings, rank))
        self.lora_B = nn.Parameter(torch.empty(num_tasks, rank, embedding_dim))
        self.scaling = alpha / rank
        self.reset_adapters()

    def reset_adapters(self) -> None:
        """The original's init: A zeros, B normal, so a new adapter changes nothing."""
        if self.lora_A.is_meta:
            return
        with torch.no_grad():
            self.lora_A.zero_()
            nn.init.normal_(self.lora_B)

    def forward(self, input_ids: Tensor, tasks: Tensor | None = None) -> Tensor:
        """ids (...) -> (..., dim); tasks: each row's task (add_task_deltas), None: the plain Embedding."""
        out = super().forward(input_ids)
        if tasks is None:
            return out
        return add_task_deltas(out, input_ids, tasks, self._delta)

    def _delta(self, ids: Tensor, task: int) -> Tensor:
        return F.embedding(ids, self.lora_A[task]) @ self.lora_B[task] * self.scaling


def with_tasks(layer: nn.Module, x: Tensor, tasks: Tensor | None) -> Tensor:
    """`layer(x)`, with each row's task adapter where tasks are given (a LoRALinear or LoRAEmbedding)."""
    return layer(x) if tasks is None else layer(x, tasks)
