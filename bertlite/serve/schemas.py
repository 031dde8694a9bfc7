"""Request bodies of `POST /v1/embeddings` (OpenAI) and `POST /embed` (TEI): parsed and
checked by hand, so every error names its field; no web framework imported here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ENCODING_FORMATS = ("float", "base64")
OPENAI_FIELDS = ("input", "model", "encoding_format", "dimensions", "user", "prompt_name", "prompt")
TEI_FIELDS = ("inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "prompt", "dimensions")


class RequestError(Exception):
    """An HTTP error with the message the client sees; `param` names the field when one is at fault;
    `close`: the connection closes after the answer (its request was not read to the end)."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None, close: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.close = close


@dataclass
class EmbedRequest:
    texts: list[str]
    prompt: str | None = None
    prompt_name: str | None = None
    dimensions: int | None = None
    encoding_format: str = "float"
    normalize: bool = False  # L2-normalize what the model gives (TEI's normalize)
    truncate: bool | None = None  # None: the server's --auto-truncate


def parse_openai(body: bytes) -> EmbedRequest:
    data = _json_object(body, OPENAI_FIELDS)
    if "input" not in data:
        raise _invalid("input: required (a string or a list of strings)", "input")
    for name in ("model", "user"):
        _optional(data, name, str, "a string")
    encoding_format = _optional(data, "encoding_format", str, "a string") or "float"
    if encoding_format not in ENCODING_FORMATS:
        formats = ", ".join(ENCODING_FORMATS)
        raise _invalid(f"encoding_format: {encoding_format!r} is not one of {formats}", "encoding_format")
    dimensions = _dimensions(data)
    return EmbedRequest(
        texts=_texts(data["input"], "input"),
        prompt=_optional(data, "prompt", str, "a string"),
        prompt_name=_optional(data, "prompt_name", str, "a string"),
        dimensions=dimensions,
        encoding_format=encoding_format,
        normalize=dimensions is not None,  # OpenAI re-normalizes the shortened vectors
    )


def parse_tei(body: bytes) -> EmbedRequest:
    data = _json_object(body, TEI_FIELDS)
    if "inputs" not in data:
        raise _invalid("inputs: required (a string or a list of strings)", "inputs")
    normalize = _optional(data, "normalize", bool, "true or false")
    direction = _optional(data, "truncation_direction", str, "a string") or "Right"
    if direction != "Right":
        raise _invalid(f"truncation_direction: only 'Right' is supported, got {direction!r}", "truncation_direction")
    return EmbedRequest(
        texts=_texts(data["inputs"], "inputs"),
        prompt=_optional(data, "prompt", str, "a string"),
        prompt_name=_optional(data, "prompt_name", str, "a string"),
        dimensions=_dimensions(data),
        normalize=True if normalize is None else normalize,
        truncate=_optional(data, "truncate", bool, "true or false"),
    )


def _json_object(body: bytes, fields: tuple[str, ...]) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except RecursionError:
        raise _invalid("the body is not valid JSON: it is nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _invalid(f"the body is not valid JSON: {e}") from e
    except ValueError:  # Python's int() refuses a number of over 4300 digits (sys.get_int_max_str_digits)
        raise _invalid("the body is not valid JSON: a number in it has too many digits") from None
    if not isinstance(data, dict):
        raise _invalid(f"the body must be a JSON object, got {_kind(data)}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _invalid(f"{unknown[0]}: unknown field (known: {', '.join(fields)})", unknown[0])
    return data


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise _invalid(f"{name}: must be a string or a list of strings, got {_kind(value)}", name)
    if not value:
        raise _invalid(f"{name}: must not be an empty list", name)
    for i, text in enumerate(value):
        if isinstance(text, int | list) and not isinstance(text, bool):
            raise _invalid(f"{name}[{i}]: token ids are not supported; send the text as a string", name)
        if not isinstance(text, str):
            raise _invalid(f"{name}[{i}]: must be a string, got {_kind(text)}", name)
    return value


def _dimensions(data: dict[str, Any]) -> int | None:
    value = data.get("dimensions")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise _invalid(f"dimensions: must be a positive integer, got {json.dumps(value)}", "dimensions")
    return value


def _optional(data: dict[str, Any], name: str, kind: type, description: str) -> Any:
    value = data.get(name)
    if value is not None and not isinstance(value, kind):
        raise _invalid(f"{name}: must be {description}, got {_kind(value)}", name)
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _invalid(message: str, param: str | None = None) -> RequestError:
    return RequestError(422, message, param, "invalid_request")
