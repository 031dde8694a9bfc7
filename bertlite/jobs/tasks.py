"""A model's task adapters as the jobs use them: a task name checked against the model's, and each text's task
carried with its encoding, so batches sorted by length (or a server's batches of several requests) keep every text's
adapter; the batch's adapter_mask is read from its encodings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from bertlite.layers.lora import NO_TASK


class TaskEncoding:
    """An encoding and the index of the task adapter its text runs with; every other attribute is the encoding's."""

    __slots__ = ("encoding", "task")

    def __init__(self, encoding: Any, task: int) -> None:
        self.encoding = encoding
        self.task = task

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoding, name)


def task_index(model: nn.Module, task: str | None) -> int | None:
    """The index of `task`'s adapter in the model.

    Args:
        model: the base model (its config's lora_adaptations).
        task: a task name; None: none.

    Returns:
        The index, None for no task.

    Raises:
        ValueError: a task for a model without adapters, or an unknown one (naming the tasks there are).
    """
    if task is None:
        return None
    config = getattr(model, "config", None)
    if not getattr(config, "lora_adaptations", None):
        raise ValueError(f"task={task!r}: this model has no task adapters")
    return config.task_id(task)


def job_task_index(job: Any, task: str | None) -> int | None:
    """task_index for a job's model: `task`, else the job's default_task (an Embedder's), None for neither."""
    return task_index(job.bert, getattr(job, "default_task", None) if task is None else task)


def with_task(encodings: list[Any], task: int | None) -> list[Any]:
    """`encodings`, each carrying `task` (TaskEncoding) unless it carries one already; None: as they are."""
    if task is None:
        return encodings
    return [e if getattr(e, "task", None) is not None else TaskEncoding(e, task) for e in encodings]


def adapter_mask(encodings: Sequence[Any], rows: int, device: torch.device) -> dict[str, Tensor]:
    """The base model's adapter_mask keyword for a batch: each text's task, NO_TASK for a text without one and for
    the filler rows after them; {} when no text has a task (a model without adapters never gets it).

    Args:
        encodings: the batch's encodings.
        rows: the sequences the batch runs, filler included.
        device: where the model runs.
    """
    tasks = [getattr(e, "task", None) for e in encodings]
    if all(task is None for task in tasks):
        return {}
    ids = [NO_TASK if task is None else task for task in tasks] + [NO_TASK] * (rows - len(tasks))
    return {"adapter_mask": torch.tensor(ids, device=device)}
