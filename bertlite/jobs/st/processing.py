"""encode(processing_kwargs=...) and predict(processing_kwargs=...): sentence-transformers' per-call tokenizer
options, as far as bertlite's tokenization honours them.

sentence-transformers nests them by modality ({"text": {"max_length": 4, "truncation": True}}, or "common" for
every modality). bertlite reads text only, always truncates (longest segment first) and never pads a packed
batch, so it takes a shorter or longer max_length and truncation=True; any other key is refused by name.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["for_call", "processing_max_length", "takes_processing_kwargs"]

J = TypeVar("J")
F = TypeVar("F", bound=Callable[..., Any])
# The modality keys a text model reads; sentence-transformers' others (image, audio, chat_template...) are refused.
MODALITIES = ("text", "common")
# The truncation values that are what bertlite does anyway: longest segment first.
TRUNCATION = (True, "longest_first")


def processing_max_length(processing_kwargs: dict[str, Any] | None) -> int | None:
    """The max_length that processing_kwargs ask for.

    Args:
        processing_kwargs: encode's or predict's processing_kwargs; None: none.

    Returns:
        The max_length ("text"'s over "common"'s), or None when they give none.

    Raises:
        ValueError: a key bertlite does not honour, naming it; a max_length that is not a positive integer.
    """
    if not processing_kwargs:
        return None
    if not isinstance(processing_kwargs, dict):
        raise ValueError(f"processing_kwargs must be a dict by modality, got {type(processing_kwargs).__name__}")
    max_length = None
    for modality in sorted(processing_kwargs, key=lambda key: key == "text"):  # "text" last: it wins
        options = processing_kwargs[modality]
        if modality not in MODALITIES or not isinstance(options, dict):
            raise ValueError(f"processing_kwargs[{modality!r}]: bertlite reads text only: give {{'text': {{...}}}}")
        for key, value in options.items():
            if key == "truncation" and value in TRUNCATION:
                continue
            if key != "max_length":
                raise ValueError(
                    f"processing_kwargs[{modality!r}][{key!r}]={value!r} is not honoured by bertlite: it takes "
                    "max_length and truncation=True"
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"processing_kwargs[{modality!r}]['max_length'] must be a positive int, got {value!r}")
            max_length = value
    return max_length


def for_call(job: J, processing_kwargs: dict[str, Any] | None) -> J:
    """The job that runs one call with processing_kwargs: the job itself, or a shallow copy with its own
    tokenizer truncating at their max_length (the job's own tokenizer is shared by threads, so it is not changed).

    Args:
        job: a BaseEncoder job.
        processing_kwargs: the call's processing_kwargs (processing_max_length).

    Returns:
        job, or its copy for this call.

    Raises:
        ValueError: as processing_max_length.
    """
    max_length = processing_max_length(processing_kwargs)
    if max_length is None:
        return job
    twin = copy.copy(job)
    twin._set_backend(job.backend_tokenizer)  # a copy of the tokenizer, truncating at the job's max_length
    twin.max_length = max_length
    if hasattr(twin, "_query_pairs"):
        twin._query_pairs = None  # built for the job's tokenizer and max_length
    return twin


def takes_processing_kwargs(method: F) -> F:
    """A decorator for encode or predict that takes processing_kwargs= and runs the call on for_call's job.

    Args:
        method: the job's method.

    Returns:
        The method, taking processing_kwargs as a keyword.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return method(for_call(self, kwargs.pop("processing_kwargs", None)), *args, **kwargs)

    return wrapper  # type: ignore[return-value]
