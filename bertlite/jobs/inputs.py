"""What a job takes in: texts and pairs checked with errors that name the input, counts, prompts put before
texts, and the progress bar a long call shows.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Sequence
from typing import Any

from bertlite.utils.text import SURROGATE

Text = str | tuple[str, str]  # one text, or a (text_a, text_b) pair


def with_prompt(texts: Sequence[Text], prompt: str) -> Sequence[Text]:
    """`prompt` put before every text (before the first text of a pair); texts unchanged for an empty prompt."""
    if not prompt:
        return texts
    # Items that are not texts pass unchanged, for encodings() to name them.
    return [prompt + t if isinstance(t, str) else (prompt + t[0], *t[1:]) if _is_pair(t) else t for t in texts]


def prompt_names(prompts: dict[str, str]) -> str:
    """The prompts' names for an error message: "(document, query)", or "(none)"."""
    return "(" + ", ".join(sorted(prompts)) + ")" if prompts else "(none)"


def progress_bar(total: int, show: bool | None, initial: int = 0) -> Any:
    """A tqdm bar on stderr counting texts; show=None: shown when stderr is a terminal."""
    from tqdm import tqdm

    disable = not (sys.stderr.isatty() if show is None else show)
    return tqdm(total=total, initial=initial, unit="text", disable=disable, file=sys.stderr, dynamic_ncols=True)


def check_count(name: str, value: object, none: str = "the default") -> None:
    """A count option: None (meaning `none`) or an int >= 1; never a float or a bool.

    Raises:
        ValueError: naming the option and the value.
    """
    if value is None:
        return
    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None or number < 1:
        raise ValueError(f"{name} must be an integer >= 1 (or None for {none}), got {value!r}")


def check_text(text: object, index: int) -> None:
    """A str or a (text_a, text_b) pair of str, without lone surrogates.

    Raises:
        ValueError: naming texts[index] and what is wrong.
    """
    pair = isinstance(text, tuple | list) and len(text) == 2 and all(isinstance(p, str) for p in text)
    if not (isinstance(text, str) or pair):
        raise ValueError(
            f"texts[{index}] is {type(text).__name__} {_preview(text)}; each text must be a str "
            "or a (text_a, text_b) pair of str"
        )
    for part in text if pair else (text,):
        if surrogate := SURROGATE.search(part):
            raise ValueError(
                f"texts[{index}] holds a lone surrogate (\\u{ord(surrogate.group()):04x}), which is not Unicode "
                "text; replace it (e.g. with U+FFFD)"
            )


def _is_pair(text: object) -> bool:
    return isinstance(text, tuple | list) and len(text) == 2 and isinstance(text[0], str)


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
