"""What a job takes in: texts and pairs checked with errors that name the input, counts, prompts put before
texts, and the progress bar a long call shows.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bertlite.utils.text import SURROGATE

Text = str | tuple[str, str]  # one text, or a (text_a, text_b) pair
# What an encode's texts must be, for check_texts' messages.
TEXTS = "a list of str or of (text_a, text_b) pairs"
ONE_OR_MORE_TEXTS = "a str or a list of str"
PAIRS = "a (text_a, text_b) pair or a list of such pairs"


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


def check_count(name: str, value: object, none: str | None = "the default", must: str = "an integer >= 1") -> None:
    """A count option: an int >= 1, or None where `none` says what None means; never a float, str or bool.

    Args:
        name: the option's name, for the message.
        value: what was given.
        none: what None means; None: None is refused too.
        must: what the message says it must be ("a positive integer" where sentence-transformers says so).

    Raises:
        ValueError: naming the option and the value.
    """
    if value is None and none is not None:
        return
    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None or number < 1:
        allowed = f" (or None for {none})" if none is not None else ""
        raise ValueError(f"{name} must be {must}{allowed}, got {_preview(value)}")


def check_truncate_dim(value: object, dimension: int) -> None:
    """truncate_dim: None (every dimension) or an int from 1 to `dimension`.

    Raises:
        ValueError: naming truncate_dim and the value.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:  # an integer: name the range it misses
        raise ValueError(f"truncate_dim={value} must be between 1 and the dimension {dimension}")
    check_count("truncate_dim", value, none="every dimension")
    if value is not None and operator.index(value) > dimension:
        raise ValueError(f"truncate_dim={value} must be between 1 and the dimension {dimension}")


def check_texts(name: str, texts: object, what: str = ONE_OR_MORE_TEXTS, one_str: bool = True) -> None:
    """The texts argument of a public method: a list (or other iterable) of texts, or one str where `one_str`.

    A dict is refused, as sentence-transformers refuses it: iterating it would encode its keys.

    Args:
        name: the argument's name, for the message.
        texts: what was given.
        what: what the argument must be, for the message.
        one_str: whether a single str is taken (as one text).

    Raises:
        TypeError: naming the argument, what it must be and what it got.
    """
    if isinstance(texts, str):
        if one_str:
            return
        raise TypeError(f"{name} must be {what}, got a single str; wrap a single string in a list")
    if isinstance(texts, Mapping | bytes | bytearray) or not isinstance(texts, Iterable):
        raise TypeError(f"{name} must be {what}, got {type(texts).__name__} {_preview(texts)}")


def check_sparse_row(indices: Any, values: Any, vocab_size: int) -> None:
    """One sparse vector's (indices, values): 1-D, as many of each, every index a vocabulary id.

    Args:
        indices: the vocabulary ids (a tensor or an array).
        values: their weights (a tensor or an array).
        vocab_size: the vectors' length.

    Raises:
        ValueError: naming what is wrong.
    """
    if indices.ndim != 1 or values.ndim != 1 or len(indices) != len(values):
        raise ValueError(
            f"embeddings' (indices, values) must be two 1-D sequences of one length, got shapes "
            f"{tuple(indices.shape)} and {tuple(values.shape)}"
        )
    if len(indices) and not 0 <= int(indices.min()) <= int(indices.max()) < vocab_size:
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise ValueError(f"embeddings holds index {bad}; an index must be a vocabulary id from 0 to {vocab_size - 1}")


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
