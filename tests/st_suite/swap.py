"""bertlite's names in place of sentence-transformers' own, for the vendored test files only.

An `import` statement calls builtins.__import__ with the importing module's globals. The wrapper installed
here looks at those globals: for a module under vendor/ (at import, that is at collection, and for the
imports inside test functions, at run time), `from sentence_transformers[.sub] import Name` gives

- bertlite's class for SentenceTransformer, CrossEncoder, SparseEncoder, MultiVectorEncoder and
  SimilarityFunction, whichever sub-module the test names it from;
- bertlite.util for `util`, and bertlite.util's function for a public name from sentence_transformers.util
  (or its sub-modules similarity, retrieval, quantization); a name bertlite.util lacks becomes a stand-in
  that raises AttributeError("bertlite.util has no ...") when used, so the file still collects and only the
  tests that use it fail;
- sentence-transformers' own object for everything else: its modules (Pooling, Transformer, Router...),
  private helpers and the test plumbing (fullname, is_datasets_available, decorators, file_io).

Every module outside vendor/ (sentence-transformers' own included) imports as usual, so the rest of the
suite still compares bertlite against the real sentence-transformers in the same process. The vendored
files' `from tests.x import y` (their own helpers) resolve to vendor/tests/x.
"""

from __future__ import annotations

import builtins
import functools
import types
from pathlib import Path
from typing import Any

VENDOR = Path(__file__).resolve().parent / "vendor"
VENDOR_PACKAGE = "tests.st_suite.vendor.tests"
CLASSES = ("SentenceTransformer", "CrossEncoder", "SparseEncoder", "MultiVectorEncoder", "SimilarityFunction")
# sentence_transformers.util's names the tests use as plumbing, not as the API under test.
UTIL_MODULES = frozenset(
    "sentence_transformers.util" + sub for sub in ("", ".similarity", ".retrieval", ".quantization", ".tensor")
)
PLUMBING = frozenset({"fullname", "import_from_string", "is_datasets_available", "is_training_available"})


class Missing:
    """Stands for a name bertlite does not have; any use raises AttributeError with the name."""

    def __init__(self, where: str, name: str) -> None:
        self._message = f"{where} has no {name!r} (sentence-transformers has)"

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(self._message)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(self._message)


@functools.cache
def _under_vendor(file: str) -> bool:
    return Path(file).resolve().is_relative_to(VENDOR)


def _is_vendored(globals_: dict[str, Any] | None) -> bool:
    """Whether the importing module is a vendored file; every import in the process asks, so it is cached."""
    file = globals_.get("__file__") if globals_ else None
    return isinstance(file, str) and _under_vendor(file)


def bertlite_name(module: str, name: str) -> Any:
    """bertlite's object for `from <module> import <name>`, or None to keep sentence-transformers' own."""
    import bertlite
    import bertlite.util

    if name in CLASSES:
        return getattr(bertlite, name)
    if module == "sentence_transformers" and name == "util":
        return bertlite.util
    is_util = module in UTIL_MODULES
    if is_util and not name.startswith("_") and name not in PLUMBING:
        if module == "sentence_transformers.util" and name in {"similarity", "retrieval", "quantization"}:
            return bertlite.util  # a sub-module there; bertlite.util holds its functions
        return getattr(bertlite.util, name, None) or Missing("bertlite.util", name)
    return None


def install(*, swap_names: bool) -> None:
    """Wrap builtins.__import__ (once) so that vendored modules find their own `tests` helpers and, with
    `swap_names`, import bertlite's names (without: sentence-transformers' own, the reference run)."""
    original = builtins.__import__
    if getattr(original, "_st_suite_swap", False):
        return

    def swapping_import(name, globals=None, locals=None, fromlist=(), level=0):  # __import__'s own parameter names
        if level or not _is_vendored(globals):
            return original(name, globals, locals, fromlist, level)
        if name == "tests" or name.startswith("tests."):
            name = VENDOR_PACKAGE + name[len("tests") :]
            return original(name, globals, locals, fromlist, level)
        module = original(name, globals, locals, fromlist, level)
        if not swap_names or not fromlist or name.split(".")[0] != "sentence_transformers":
            return module
        swapped = {n: bertlite_name(name, n) for n in fromlist}
        if all(value is None for value in swapped.values()):
            return module
        proxy = types.ModuleType(name)
        for n in fromlist:
            proxy.__dict__[n] = getattr(module, n) if swapped[n] is None else swapped[n]
        return proxy

    swapping_import._st_suite_swap = True  # type: ignore[attr-defined]
    builtins.__import__ = swapping_import
