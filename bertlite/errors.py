"""The exceptions and warnings users catch, in one place; no torch import.

Each is re-exported by the module that raises it, so `bertlite.hub.CheckpointNotFoundError`
and `bertlite.errors.CheckpointNotFoundError` are the same class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertlite.checkpoint.plan import LoadReport

# --- checkpoints ---------------------------------------------------------------------


class CheckpointNotFoundError(OSError):
    """The folder or hub repo does not exist, or cannot be reached."""


class NotCachedError(CheckpointNotFoundError):
    """Offline (or the hub is unreachable) and the file is not in the local cache."""


class DownloadError(CheckpointNotFoundError):
    """The hub was reached but the download failed: a server error, a dropped connection, or
    bytes that do not match the file's advertised size or hash. Nothing is left in the cache,
    so retrying may succeed."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as it is: bad file, keys or shapes.

    `report` holds the key lists when the problem is keys or shapes.
    """

    def __init__(self, message: str, report: LoadReport | None = None) -> None:
        super().__init__(message)
        self.report = report


class WeightsNotFoundError(CheckpointNotFoundError, CheckpointError):
    """A checkpoint folder or repo without a weights file: an OSError, as transformers raises for it
    (so `except OSError:` around from_pretrained works alike), and a CheckpointError."""

    report = None


class ShapeMismatchError(CheckpointError, RuntimeError):
    """Checkpoint tensors whose shape (or dtype) does not fit the model: a RuntimeError, as transformers
    raises for it (so `except RuntimeError:` around from_pretrained works alike), and a CheckpointError."""


class ParityLoadError(Exception):
    """The parity comparison could not start: bad arguments, model not found, missing dependency."""


# --- inputs and optional dependencies ------------------------------------------------------


class InputError(ValueError):
    """The input cannot be read as asked: file, format, encoding, or field."""


class RayNotInstalledError(ImportError):
    """Ray (with Ray Data) is not importable."""


class AttentionUnavailableError(ImportError, ValueError):
    """An attention implementation of transformers' that bertlite does not have (flash_attention_2, ...).

    An ImportError, as transformers raises when the flash-attn package is missing, so the usual
    `except ImportError:` fallback to sdpa works; a ValueError too, as for any other unknown name."""


# --- warnings ----------------------------------------------------------------------------


class SlowDtypeWarning(UserWarning):
    """A dtype this CPU has no native kernels for: it runs, but several times slower than float32."""


class Int8PrecisionWarning(UserWarning):
    """int8 drifts past its bar: a job's answer on the calibration texts misses its int8 bar (bertlite.jobs.bars),
    or the CPU's fast int8 kernels are exact only with 7-bit activations or weights."""


class CompiledQuantizationWarning(UserWarning):
    """The compiled int8 quantization kernel failed at run time; the eager ops run from then on (same numbers)."""


# --- messages ----------------------------------------------------------------------------

# How to load anyway, from Python; parity (which has no such options) replaces them by what to do there.
STRICT_HINT = "(pass strict=False to load anyway)"
NONFINITE_HINT = "pass allow_nonfinite=True to load it anyway, to inspect it"


def one_line(error: BaseException | str, *, strict: str | None = None, nonfinite: str | None = None) -> str:
    """An error's message on one line, for a command line.

    Args:
        error: the exception, or its message.
        strict, nonfinite: what the command offers instead of the advice only the Python API can follow
            (STRICT_HINT, NONFINITE_HINT); None keeps that advice.

    Returns:
        The message's non-blank lines joined into one.
    """
    text = str(error)
    for hint, instead in ((STRICT_HINT, strict), (NONFINITE_HINT, nonfinite)):
        if instead is not None:
            text = text.replace(hint, instead)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = lines[0] if lines else type(error).__name__
    for line in lines[1:]:
        joined += (" " if joined.endswith(":") else "; ") + line
    return joined
