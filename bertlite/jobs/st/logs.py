"""What sentence-transformers' classes report where bertlite's drop-ins do the same thing: log records, prompt errors.

sentence-transformers reports deprecated keywords, a prompt given twice and untrusted settings through `logging`,
not `warnings`; code that reads those records (a test's caplog, a log handler) finds them here too, under the
logger "bertlite.jobs.st" and with sentence-transformers' wording.
"""

from __future__ import annotations

import logging

from bertlite.utils.warn import warn_user

__all__ = ["deprecated", "logger", "prompt_over_name"]

logger = logging.getLogger("bertlite.jobs.st")


def deprecated(message: str) -> None:
    """Report a deprecated keyword or method both ways: a FutureWarning at the user's line (bertlite's) and a
    warning log record (sentence-transformers').

    Args:
        message: what is deprecated and what to use instead.
    """
    warn_user(message, FutureWarning)
    logger.warning(message)


def prompt_over_name(prompts: dict[str, str], prompt: str | None, prompt_name: str | None) -> str | None:
    """The prompt_name encode uses, as sentence-transformers picks it: None when a prompt is given too (the prompt
    wins, and a warning is logged).

    Args:
        prompts: the model's prompts, by name.
        prompt: the prompt text encode was given.
        prompt_name: the prompt name encode was given.

    Returns:
        prompt_name, or None when both were given.

    Raises:
        ValueError: a prompt_name (without a prompt) that is not in prompts, in sentence-transformers' words.
    """
    if prompt is not None and prompt_name is not None:
        logger.warning(
            "Provide either a `prompt`, a `prompt_name`, or neither, but not both. "
            "Ignoring the `prompt_name` in favor of `prompt`."
        )
        return None
    if prompt_name is not None and prompt_name not in prompts:
        raise ValueError(
            f"Prompt name {prompt_name!r} not found in the configured prompts dictionary with keys {list(prompts)}."
        )
    return prompt_name
