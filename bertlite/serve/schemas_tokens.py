"""Request bodies of TEI's tokenizer routes, `/tokenize` and `/decode`."""

from __future__ import annotations

import json
from dataclasses import dataclass

from bertlite.serve.schemas import invalid, is_int, json_object, kind_name, optional, texts_field

TOKENIZE_FIELDS = ("inputs", "add_special_tokens", "prompt_name")
DECODE_FIELDS = ("ids", "skip_special_tokens")


@dataclass
class TokenizeRequest:
    texts: list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None


@dataclass
class DecodeRequest:
    ids: list[list[int]]
    skip_special_tokens: bool = True


def parse_tokenize(body: bytes) -> TokenizeRequest:
    data = json_object(body, TOKENIZE_FIELDS)
    if "inputs" not in data:
        raise invalid("inputs: required (a string or a list of strings)", "inputs")
    special = optional(data, "add_special_tokens", bool, "true or false")
    return TokenizeRequest(
        texts=texts_field(data["inputs"], "inputs"),
        add_special_tokens=True if special is None else special,
        prompt_name=optional(data, "prompt_name", str, "a string"),
    )


def parse_decode(body: bytes) -> DecodeRequest:
    """ids: a list of token ids (one sequence) or a list of such lists."""
    data = json_object(body, DECODE_FIELDS)
    value = data.get("ids")
    if not isinstance(value, list) or not value:
        raise invalid(f"ids: required, a non-empty list of token ids or of such lists, got {kind_name(value)}", "ids")
    rows, names = (
        ([value], ["ids"]) if not isinstance(value[0], list) else (value, [f"ids[{i}]" for i in range(len(value))])
    )
    for row, name in zip(rows, names, strict=True):
        if not isinstance(row, list):
            raise invalid(f"{name}: must be a list of token ids, got {kind_name(row)}", "ids")
        for j, token in enumerate(row):
            if not is_int(token) or token < 0:
                raise invalid(f"{name}[{j}]: a token id must be an integer >= 0, got {json.dumps(token)}", "ids")
    special = optional(data, "skip_special_tokens", bool, "true or false")
    return DecodeRequest(ids=rows, skip_special_tokens=True if special is None else special)
