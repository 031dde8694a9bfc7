"""Warnings that point at the user's line, however deep inside bertlite they are raised.

A fixed `stacklevel` is right for one call path only: `BertConfig.from_dict`, `BertConfig.from_pretrained`
and `BertModel.from_pretrained` reach the same check at different depths. Python 3.12's
`warnings.warn(skip_file_prefixes=...)` does this; bertlite supports 3.10 and 3.11, so the depth is counted here.
No torch import: config.py uses it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

# As the frames name them: bertlite's files come from the same sys.path entry as this one.
_PACKAGE = os.path.dirname(__file__) + os.sep


def _internal_prefixes() -> tuple[str, ...]:
    """Files whose frames are not the user's: bertlite's own, contextlib's (`with empty_init()`), and torch's
    (module construction, torch function modes) when torch is loaded."""
    prefixes = [_PACKAGE, contextlib.__file__]
    torch = sys.modules.get("torch")
    if getattr(torch, "__file__", None):
        prefixes.append(os.path.dirname(torch.__file__) + os.sep)
    return tuple(prefixes)


def user_stacklevel() -> int:
    """The stacklevel, for a `warnings.warn` in the caller of this function, of the first frame outside
    bertlite (and torch, contextlib); the outermost frame when every frame is internal (bertlite's CLI)."""
    internal = _internal_prefixes()
    frame = sys._getframe(1)  # the caller, which calls warnings.warn: stacklevel 1
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """warnings.warn(message, category), attributed to the user's call into bertlite."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
