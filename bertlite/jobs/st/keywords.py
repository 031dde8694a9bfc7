"""sentence-transformers' older keyword names and input forms, still accepted where sentence-transformers accepts them.

`renamed_keywords(sentences="inputs")` on a method lets `model.encode(sentences=texts)` run as
`model.encode(inputs=texts)`, with a FutureWarning naming the new keyword; given both, the new name wins and the
old one is dropped, as sentence-transformers' deprecated_kwargs does. `arrays_as_lists` lets a numpy array of
strings stand for the list it holds; `classifier_dropout` takes CrossEncoder's older keyword of that name. The
wrapped methods keep their signatures (inspect.signature follows __wrapped__).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from torch import nn

from bertlite.jobs.st.logs import deprecated

__all__ = ["arrays_as_lists", "classifier_dropout", "encode_task", "renamed_keywords"]

F = TypeVar("F", bound=Callable[..., Any])


def renamed_keywords(**renames: str) -> Callable[[F], F]:
    """A decorator that accepts each old keyword of `renames` (old name -> new name) under its new name.

    Args:
        **renames: the old keyword names and the names they became.

    Returns:
        The decorator: the method called with the old names renamed, warning once per call with a FutureWarning.
    """

    def decorator(method: F) -> F:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    value = kwargs.pop(old)
                    deprecated(f"The `{old}` argument was renamed and is now deprecated; use `{new}`")
                    kwargs.setdefault(new, value)
            return method(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def arrays_as_lists(method: F) -> F:
    """A decorator for a method whose first argument after self is its inputs: a numpy array of strings (or
    objects) there becomes its nested list (`.tolist()`), as sentence-transformers reads it: a 1-D array of texts is
    a list of texts, a 2-D one a list of pairs (a CrossEncoder's 1-D array is one pair).
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and _is_text_array(args[0]):
            args = (args[0].tolist(), *args[1:])
        elif _is_text_array(kwargs.get("inputs")):
            kwargs["inputs"] = kwargs["inputs"].tolist()
        return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _is_text_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in ("U", "O")


def classifier_dropout(init: F) -> F:
    """A decorator for CrossEncoder.__init__ that takes sentence-transformers' older `classifier_dropout=` keyword
    (there: config_kwargs={"classifier_dropout": ...}): set on the model's config and the classifier's dropout, with
    a FutureWarning; it changes nothing in eval mode, only training's dropout.
    """

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        dropout = kwargs.pop("classifier_dropout", None)
        init(self, *args, **kwargs)
        if dropout is None:
            return
        deprecated(
            f"The CrossEncoder `classifier_dropout` argument is deprecated; use config_kwargs={{'classifier_dropout': "
            f"{dropout}}} in sentence-transformers"
        )
        self.model.config.classifier_dropout = dropout
        classifier = getattr(self.model, "classifier", None)
        for owner in (self.model, classifier):
            if isinstance(getattr(owner, "dropout", None), nn.Dropout):
                owner.dropout.p = dropout

    return wrapper  # type: ignore[return-value]


def encode_task(job: Any, kwargs: dict[str, Any]) -> str | None:
    """The `task` among an encode's extra keywords (sentence-transformers' Router models route by it).

    Args:
        job: the job whose encode was called (its class names it in the error).
        kwargs: encode's **kwargs.

    Returns:
        The task, or None.

    Raises:
        ValueError: a keyword other than task, as sentence-transformers words it.
    """
    if unused := sorted(set(kwargs) - {"task"}):
        raise ValueError(
            f"{type(job).__name__}.encode() has been called with additional keyword arguments that this model does "
            f"not use: {unused}"
        )
    return kwargs.get("task")
