"""Warnings that point at the user's line, however deep inside bertlite they are raised.

A fixed `stacklevel` is right for one call path only: `BertConfig.from_dict`, `BertConfig.from_pretrained`
and `BertModel.from_pretrained` reach the same check at different depths. Python 3.12's
`warnings.warn(skip_file_prefixes=...)` does this; bertlite supports 3.10 and 3.11, so the depth is counted here.
No torch import: config.py uses it.
"""

from __future__ import annotations

import sys
import warnings

# Packages whose frames are not the user's: bertlite's own, contextlib's (`with empty_init()`), torch's
# (module construction, torch function modes). By module name, not file: a dataclass's generated
# __init__ has no file ("<string>") but runs in its class's module.
INTERNAL_PACKAGES = ("bertlite", "contextlib", "torch")


def _is_internal(module: str) -> bool:
    return module.split(".", 1)[0] in INTERNAL_PACKAGES


def user_stacklevel() -> int:
    """The stacklevel, for a `warnings.warn` in the caller of this function, of the first frame outside
    INTERNAL_PACKAGES; the outermost frame when every frame is internal (`python -m bertlite.cli`)."""
    frame = sys._getframe(1)  # the caller, which calls warnings.warn: stacklevel 1
    level = 1
    while frame.f_back is not None and _is_internal(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """warnings.warn(message, category), attributed to the user's call into bertlite."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
