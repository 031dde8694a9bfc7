"""OpenAI `/v1/embeddings`, TEI `/embed` (vectors), `/embed_all` (a vector per token: an Embedder's
token embeddings, a multi-vector model's vectors) and `/embed_sparse` (SPLADE)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from tokenizers import Encoding

from bertlite.serve.endpoint import Handler, floats
from bertlite.serve.schemas import EmbedRequest, RequestError, parse_openai, parse_tei, parse_tei_tokens
from bertlite.serve.service import Service
from bertlite.utils.text import SURROGATE


async def openai_embeddings(service: Service, req: EmbedRequest) -> dict:
    vectors, tokens = await _embed(service, req, "/v1/embeddings")
    if req.encoding_format == "base64":
        # OpenAI's base64: the float32 bytes, little-endian, of each vector.
        embeddings = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    else:
        embeddings = floats(vectors)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)],
        "model": service.model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def tei_embed(service: Service, req: EmbedRequest) -> Any:
    vectors, _ = await _embed(service, req, "/embed")
    return floats(vectors)


async def _embed(service: Service, req: EmbedRequest, path: str) -> tuple[np.ndarray, int]:
    embedder = service.ready_job(path)
    field = "input" if path.startswith("/v1/") else "inputs"
    if req.ids is not None:
        encodings = _id_encodings(service, req)
    else:
        texts = _with_prompt(service, req, field)
    if req.dimensions is not None and req.dimensions > embedder.dimension:
        raise RequestError(
            422, f"dimensions: {req.dimensions} is more than the model's {embedder.dimension}", "dimensions"
        )
    if req.ids is None:
        encodings = await service.tokenize(texts, req.truncate, field)
    vectors, tokens = await service.run(encodings)
    if req.dimensions is not None:
        vectors = vectors[:, : req.dimensions]
    if req.normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors.astype(np.float32, copy=False), tokens


async def tei_embed_all(service: Service, req: EmbedRequest) -> list:
    """Per input, a vector per token: an Embedder's token embeddings ([CLS] and [SEP] included), or a
    multi-vector model's kept tokens' vectors (req.is_query: tokenized as queries, else documents)."""
    job = service.ready_job("/embed_all")
    if service.model_type == "multi-vector":
        service.check_inputs(req.texts, "inputs")
        # None: the query or document prompt the model's tokenize picks
        prompt = None if req.prompt is None and req.prompt_name is None else _prompt(service, req)
        encodings = await service.tokenize(
            req.texts, req.truncate, "inputs", lambda texts: job.tokenize(texts, is_query=req.is_query, prompt=prompt)
        )
        rows, _ = await service.run(encodings)  # queries and documents differ in their tokens only
    else:
        if req.is_query:
            raise RequestError(422, "is_query: only for a multi-vector model; this is an embedding model", "is_query")
        texts = _with_prompt(service, req, "inputs")
        rows, _ = await service.run(await service.tokenize(texts, req.truncate, "inputs"), "token_embeddings")
    return [floats(np.asarray(row, dtype=np.float32)) for row in rows]


async def tei_embed_sparse(service: Service, req: EmbedRequest) -> list:
    """Per input, its non-zero dimensions as [{index, value}], indices ascending (TEI's shape)."""
    service.ready_job("/embed_sparse")
    texts = _with_prompt(service, req, "inputs")
    rows, _ = await service.run(await service.tokenize(texts, req.truncate, "inputs"))
    return [
        [{"index": int(i), "value": float(v)} for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
        for indices, values in rows
    ]


def _with_prompt(service: Service, req: EmbedRequest, field: str) -> list[str]:
    """The texts, checked, with the job's prompt (the request's, else the model's default) before each."""
    service.check_inputs(req.texts, field)
    prompt = _prompt(service, req)
    return [prompt + text for text in req.texts] if prompt else req.texts


def _prompt(service: Service, req: EmbedRequest) -> str:
    """The request's prompt (prompt, else the model's prompts[prompt_name], else its default)."""
    try:
        prompt = service.job.resolve_prompt(req.prompt, req.prompt_name)
    except ValueError as e:
        raise RequestError(422, str(e), "prompt_name", "invalid_request") from e
    if surrogate := SURROGATE.search(prompt):
        raise RequestError(422, f"prompt holds a lone surrogate (\\u{ord(surrogate.group()):04x})", "prompt")
    return prompt


def _id_encodings(service: Service, req: EmbedRequest) -> list[Encoding]:
    """Token-id inputs as the worker runs them, as given (special tokens are the client's to send):
    each id below the vocabulary size, each input within the max input length (else 413)."""
    if req.prompt is not None or req.prompt_name is not None:
        raise RequestError(422, "prompt: applies to text; token ids are run as given", "prompt")
    service.check_inputs([], "input", count=len(req.ids))
    vocab = service.job.bert.config.vocab_size
    limit = service.limits.max_input_length
    for i, ids in enumerate(req.ids):
        if len(ids) > limit:
            raise RequestError(
                413,
                f"input {i} has {len(ids)} token ids, over the max input length of {limit}",
                "input",
                "input_too_long",
            )
        if (top := max(ids)) >= vocab:
            raise RequestError(
                422, f"input {i}: token id {top} is not below the vocabulary size {vocab}", "input", "invalid_request"
            )
    return [TokenIds(ids) for ids in req.ids]


class TokenIds:
    """An input given as token ids, with what the jobs read of a tokenizers.Encoding."""

    overflowing: list = []  # noqa: RUF012 (never written: nothing was cut)

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.type_ids = [0] * len(ids)
        self.attention_mask = [1] * len(ids)


HANDLERS = (
    Handler("/v1/embeddings", parse_openai, openai_embeddings),
    Handler("/embed", parse_tei, tei_embed),
    Handler("/embed_all", parse_tei_tokens, tei_embed_all),
    Handler("/embed_sparse", parse_tei_tokens, tei_embed_sparse),
)
