"""sentence-transformers' encode_query and encode_document: the job's own encode() with the task's prompt and the task.

`encode_query = TaskEncode("query")` in a job's class body gives a method with that class's encode() signature
(help() and IDEs show it) that calls encode() by keyword with every argument, as sentence-transformers does (code
that wraps encode sees the same call), the prompt name the task picks (STBase._prompt_for) and `task=` for the
encoders that route by it.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

from bertlite.jobs.st.keywords import renamed_keywords

__all__ = ["TaskEncode"]


class TaskEncode:
    """A descriptor: the owner class's encode() for one task ("query" or "document")."""

    def __init__(self, task: str) -> None:
        """Args:
        task: the task, a key of bertlite.jobs.st.base.TASK_PROMPTS."""
        self.task = task
        self.method: Callable[..., Any] | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        signature = inspect.signature(owner.encode)  # follows the decorators' __wrapped__ to encode's own
        parameters = signature.parameters
        var_keyword = next((p.name for p in parameters.values() if p.kind is p.VAR_KEYWORD), None)
        task = self.task

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            arguments.pop(next(iter(parameters)))
            extra = dict(arguments.pop(var_keyword, {})) if var_keyword else {}
            arguments["prompt_name"] = self._prompt_for(task, arguments["prompt_name"], arguments["prompt"])
            if "task" in parameters:
                arguments["task"] = task
            elif var_keyword:
                extra["task"] = task
            return self.encode(**arguments, **extra)

        method.__name__ = method.__qualname__ = name
        method.__doc__ = (
            f"sentence-transformers' {name}: encode() with the model's {task!r} prompt (the first of the task's "
            "prompt names the model has) unless prompt or prompt_name is given; the arguments are encode()'s."
        )
        method.__signature__ = signature  # type: ignore[attr-defined]
        self.method = renamed_keywords(sentences="inputs")(method)

    def __get__(self, instance: Any, owner: type | None = None) -> Callable[..., Any]:
        if self.method is None:
            raise TypeError("TaskEncode must be assigned in a class body")
        return self.method if instance is None else types.MethodType(self.method, instance)
