"""Request bodies of the cross-encoder routes: TEI's `/rerank` and `/predict`, and the
Cohere-shaped `/v1/rerank` (`/v2/rerank`) that infinity and vLLM serve."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bertlite.serve.schemas import invalid, is_int, json_object, kind_name, optional, truncate_field

RERANK_FIELDS = ("query", "texts", "truncate", "truncation_direction", "raw_scores", "return_text")
PREDICT_FIELDS = ("inputs", "truncate", "truncation_direction", "raw_scores")
# priority: Cohere's queueing hint, accepted and ignored (one queue here).
COHERE_FIELDS = ("model", "query", "documents", "top_n", "return_documents", "priority", "max_tokens_per_doc")


@dataclass
class RerankRequest:
    query: str
    texts: list[str]
    raw_scores: bool = False  # the logits, without the model's activation
    return_text: bool = False
    truncate: bool | None = None  # None: the server's --auto-truncate
    top_n: int | None = None  # Cohere's: the best top_n only (all when more than there are)
    documents: list[dict[str, Any]] | None = None  # Cohere's: each document as returned, its fields kept


@dataclass
class PredictRequest:
    inputs: list[str | tuple[str, str]]
    single: bool  # one input, answered as one list of predictions (TEI's shape), not a list of them
    raw_scores: bool = False
    truncate: bool | None = None


def parse_rerank(body: bytes) -> RerankRequest:
    """TEI's /rerank."""
    data = json_object(body, RERANK_FIELDS)
    return RerankRequest(
        query=_query(data),
        texts=_documents(data, "texts"),
        raw_scores=bool(optional(data, "raw_scores", bool, "true or false")),
        return_text=bool(optional(data, "return_text", bool, "true or false")),
        truncate=truncate_field(data),
    )


def parse_cohere_rerank(body: bytes) -> RerankRequest:
    """Cohere's rerank (v1 and v2): documents are strings or objects with "text" (and any other fields,
    which return_documents gives back)."""
    data = json_object(body, COHERE_FIELDS)
    optional(data, "model", str, "a string")
    if data.get("max_tokens_per_doc") is not None:
        raise invalid(
            "max_tokens_per_doc: not supported; each (query, document) pair is truncated at the server's max "
            "input length",
            "max_tokens_per_doc",
        )
    priority = data.get("priority")
    if priority is not None and not is_int(priority):
        raise invalid(f"priority: must be an integer, got {kind_name(priority)}", "priority")
    top_n = data.get("top_n")
    if top_n is not None and (not is_int(top_n) or top_n < 1):
        raise invalid(f"top_n: must be an integer >= 1, got {json.dumps(top_n)}", "top_n")
    documents = data.get("documents")
    objects = None
    if isinstance(documents, list):  # Cohere v1's and Jina's {"text": ...} objects, other fields kept
        objects = [d if isinstance(d, dict) else {"text": d} for d in documents]
        documents = [_document_text(d, i) for i, d in enumerate(documents)]
    return RerankRequest(
        query=_query(data),
        texts=_documents({"documents": documents} if "documents" in data else {}, "documents"),
        return_text=bool(optional(data, "return_documents", bool, "true or false")),
        top_n=top_n,
        documents=objects,
    )


def parse_predict(body: bytes) -> PredictRequest:
    """TEI's /predict: inputs is a text, a pair [a, b], or a list of texts and pairs. As in TEI, a list of
    exactly two strings is one pair; a list of other lengths, or holding lists, is a batch."""
    data = json_object(body, PREDICT_FIELDS)
    if "inputs" not in data:
        raise invalid("inputs: required (a text, a [text, text] pair, or a list of them)", "inputs")
    value = data["inputs"]
    single = isinstance(value, str) or (
        isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
    )
    if single:
        inputs = [value if isinstance(value, str) else tuple(value)]
        names = ["inputs"]
    elif isinstance(value, list) and value:
        inputs = [_predict_input(v, i) for i, v in enumerate(value)]
        names = [f"inputs[{i}]" for i in range(len(value))]
    else:
        raise invalid(
            f"inputs: must be a text, a [text, text] pair, or a non-empty list of them, got {kind_name(value)}"
            + (" (empty)" if value == [] else ""),
            "inputs",
        )
    for item, name in zip(inputs, names, strict=True):
        if isinstance(item, tuple) and not (item[0] and item[1]):
            raise invalid(f"{name}: a pair with an empty {'first' if not item[0] else 'second'} text", "inputs")
    return PredictRequest(
        inputs=inputs,
        single=single,
        raw_scores=bool(optional(data, "raw_scores", bool, "true or false")),
        truncate=truncate_field(data),
    )


def _predict_input(value: Any, i: int) -> str | tuple[str, str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return (value[0], value[1])
    raise invalid(f"inputs[{i}]: must be a text or a [text, text] pair, got {kind_name(value)}", "inputs")


def _query(data: dict[str, Any]) -> str:
    if "query" not in data:
        raise invalid("query: required (a string)", "query")
    query = optional(data, "query", str, "a string")
    if not query:
        raise invalid("query: must not be empty", "query")
    return query


def _documents(data: dict[str, Any], name: str) -> list[str]:
    value = data.get(name)
    if not isinstance(value, list):
        raise invalid(f"{name}: required, a list of strings, got {kind_name(value)}", name)
    if not value:
        raise invalid(f"{name}: must not be an empty list", name)
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise invalid(f"{name}[{i}]: must be a string, got {kind_name(text)}", name)
        if not text:
            raise invalid(f"{name}[{i}]: must not be empty (a pair with an empty side)", name)
    return value


def _document_text(document: Any, i: int) -> Any:
    """A document's text: the string, or an object's "text" (Cohere v1's objects may hold more fields)."""
    if not isinstance(document, dict):
        return document  # _documents names what is not a string
    if "text" not in document:
        fields = ", ".join(sorted(document)) or "none"
        raise invalid(f'documents[{i}]: an object must hold "text" (a string); its fields: {fields}', "documents")
    if not isinstance(document["text"], str):
        raise invalid(f'documents[{i}]: "text" must be a string, got {kind_name(document["text"])}', "documents")
    return document["text"]
