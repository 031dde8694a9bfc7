"""Request bodies of `POST /v1/embeddings` (OpenAI) and TEI's `/embed`, `/embed_all` and
`/embed_sparse`, and the helpers every route's schema uses: parsed and checked by hand, so every
error names its field; no web framework imported here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ENCODING_FORMATS = ("float", "base64")
# task: the task adapter of a model with them (jina-embeddings-v3's), bertlite's own field.
OPENAI_FIELDS = ("input", "model", "encoding_format", "dimensions", "user", "prompt_name", "prompt", "task")
TEI_FIELDS = ("inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "prompt", "dimensions", "task")
# /embed_all and /embed_sparse; is_query: a multi-vector model's queries (else documents), bertlite's own.
TEI_TOKENS_FIELDS = ("inputs", "truncate", "truncation_direction", "prompt_name", "prompt", "is_query")


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
    texts: list[str]  # empty when ids are given
    ids: list[list[int]] | None = None  # OpenAI's input as token ids, one list per input
    prompt: str | None = None
    prompt_name: str | None = None
    dimensions: int | None = None
    encoding_format: str = "float"
    normalize: bool = False  # L2-normalize what the model gives (TEI's normalize)
    truncate: bool | None = None  # None: the server's --auto-truncate
    is_query: bool = False  # /embed_all on a multi-vector model: queries (else documents)
    task: str | None = None  # the task adapter to run; None: the model's default task, if any


def parse_openai(body: bytes) -> EmbedRequest:
    """/v1/embeddings: input is a string, a list of strings, or token ids (a list of ints, or of lists of ints)."""
    data = json_object(body, OPENAI_FIELDS)
    if "input" not in data:
        raise invalid("input: required (a string, a list of strings, or token ids)", "input")
    for name in ("model", "user"):
        optional(data, name, str, "a string")
    encoding_format = optional(data, "encoding_format", str, "a string") or "float"
    if encoding_format not in ENCODING_FORMATS:
        formats = ", ".join(ENCODING_FORMATS)
        raise invalid(f"encoding_format: {encoding_format!r} is not one of {formats}", "encoding_format")
    dimensions = _dimensions(data)
    ids = _token_ids(data["input"])
    return EmbedRequest(
        texts=[] if ids is not None else texts_field(data["input"], "input"),
        ids=ids,
        prompt=optional(data, "prompt", str, "a string"),
        prompt_name=optional(data, "prompt_name", str, "a string"),
        dimensions=dimensions,
        encoding_format=encoding_format,
        normalize=dimensions is not None,  # OpenAI re-normalizes the shortened vectors
        task=optional(data, "task", str, "a string"),
    )


def parse_tei(body: bytes) -> EmbedRequest:
    """/embed."""
    data = json_object(body, TEI_FIELDS)
    normalize = optional(data, "normalize", bool, "true or false")
    return EmbedRequest(
        texts=_tei_inputs(data),
        prompt=optional(data, "prompt", str, "a string"),
        prompt_name=optional(data, "prompt_name", str, "a string"),
        dimensions=_dimensions(data),
        normalize=True if normalize is None else normalize,
        truncate=truncate_field(data),
        task=optional(data, "task", str, "a string"),
    )


def parse_tei_tokens(body: bytes) -> EmbedRequest:
    """/embed_all and /embed_sparse."""
    data = json_object(body, TEI_TOKENS_FIELDS)
    return EmbedRequest(
        texts=_tei_inputs(data),
        prompt=optional(data, "prompt", str, "a string"),
        prompt_name=optional(data, "prompt_name", str, "a string"),
        truncate=truncate_field(data),
        is_query=bool(optional(data, "is_query", bool, "true or false")),
    )


def _tei_inputs(data: dict[str, Any]) -> list[str]:
    if "inputs" not in data:
        raise invalid("inputs: required (a string or a list of strings)", "inputs")
    return texts_field(data["inputs"], "inputs")


def truncate_field(data: dict[str, Any]) -> bool | None:
    """TEI's truncate (None: the server's --auto-truncate); truncation_direction may only be "Right"."""
    direction = optional(data, "truncation_direction", str, "a string") or "Right"
    if direction != "Right":
        raise invalid(f"truncation_direction: only 'Right' is supported, got {direction!r}", "truncation_direction")
    return optional(data, "truncate", bool, "true or false")


def _token_ids(value: Any) -> list[list[int]] | None:
    """OpenAI's token-id input (a list of ints: one input; a list of lists of ints: several), checked to
    be ints >= 0; None when value is text."""
    if not isinstance(value, list) or not value:
        return None
    if all(is_int(i) for i in value):
        rows, names = [value], ["input"]
    elif all(isinstance(row, list) for row in value):
        rows, names = value, [f"input[{i}]" for i in range(len(value))]
    else:
        return None  # text, or a mix that texts_field names
    for row, name in zip(rows, names, strict=True):
        if not row:
            raise invalid(f"{name}: an empty list of token ids", "input")
        for j, token in enumerate(row):
            if not is_int(token) or token < 0:
                raise invalid(f"{name}[{j}]: a token id must be an integer >= 0, got {json.dumps(token)}", "input")
    return rows


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def json_object(body: bytes, fields: tuple[str, ...]) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except RecursionError:
        raise invalid("the body is not valid JSON: it is nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise invalid(f"the body is not valid JSON: {e}") from e
    except ValueError:  # Python's int() refuses a number of over 4300 digits (sys.get_int_max_str_digits)
        raise invalid("the body is not valid JSON: a number in it has too many digits") from None
    if not isinstance(data, dict):
        raise invalid(f"the body must be a JSON object, got {kind_name(data)}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise invalid(f"{unknown[0]}: unknown field (known: {', '.join(fields)})", unknown[0])
    return data


def texts_field(value: Any, name: str) -> list[str]:
    """A string or a non-empty list of strings, as a list."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise invalid(f"{name}: must be a string or a list of strings, got {kind_name(value)}", name)
    if not value:
        raise invalid(f"{name}: must not be an empty list", name)
    for i, text in enumerate(value):
        if isinstance(text, int | list) and not isinstance(text, bool):
            raise invalid(
                f"{name}[{i}]: token ids go in a list of ints (or a list of such lists), not mixed with text", name
            )
        if not isinstance(text, str):
            raise invalid(f"{name}[{i}]: must be a string, got {kind_name(text)}", name)
    return value


def _dimensions(data: dict[str, Any]) -> int | None:
    value = data.get("dimensions")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise invalid(f"dimensions: must be a positive integer, got {json.dumps(value)}", "dimensions")
    return value


def optional(data: dict[str, Any], name: str, kind: type | tuple[type, ...], description: str) -> Any:
    """data[name], or None when absent or null; a 422 naming it when it is not of `kind`."""
    value = data.get(name)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and bool not in _types(kind))):
        raise invalid(f"{name}: must be {description}, got {kind_name(value)}", name)
    return value


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def kind_name(value: Any) -> str:
    """What a JSON value is, in words ("a list", "null", ...)."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def invalid(message: str, param: str | None = None) -> RequestError:
    """A 422 with message, naming the field param."""
    return RequestError(422, message, param, "invalid_request")
