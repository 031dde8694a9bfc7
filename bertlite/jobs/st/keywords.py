"""sentence-transformers' older keyword names, still accepted where sentence-transformers accepts them.

`renamed_keywords(sentences="inputs")` on a method lets `model.encode(sentences=texts)` run as
`model.encode(inputs=texts)`, with a FutureWarning naming the new keyword; given both, the new name wins and the
old one is dropped, as sentence-transformers' deprecated_kwargs does. The wrapped method keeps its signature
(inspect.signature follows __wrapped__).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from bertlite.utils.warn import warn_user

__all__ = ["renamed_keywords"]

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
                    warn_user(f"The `{old}` argument was renamed and is now deprecated; use `{new}`", FutureWarning)
                    kwargs.setdefault(new, value)
            return method(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
