"""OpenAI `/v1/embeddings`, TEI `/embed` (vectors), `/embed_all` (a vector per token: an Embedder's
token embeddings, a multi-vector model's vectors) and `/embed_sparse` (SPLADE): each parses its body,
makes one call into the service and shapes the answer as its API does."""

from __future__ import annotations

import base64
from typing import Any

from bertlite.serve.endpoint import Handler, floats
from bertlite.serve.schemas import EmbedRequest, parse_openai, parse_tei, parse_tei_tokens
from bertlite.serve.service import Service


async def openai_embeddings(service: Service, req: EmbedRequest) -> dict:
    vectors, tokens = await service.embed(req, "/v1/embeddings")
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
    vectors, _ = await service.embed(req, "/embed")
    return floats(vectors)


async def tei_embed_all(service: Service, req: EmbedRequest) -> list:
    """Per input, a vector per token (Service.embed_all)."""
    return [floats(row) for row in await service.embed_all(req)]


async def tei_embed_sparse(service: Service, req: EmbedRequest) -> list:
    """Per input, its non-zero dimensions as [{index, value}], indices ascending (TEI's shape)."""
    return [
        [{"index": int(i), "value": float(v)} for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
        for indices, values in await service.embed_sparse(req)
    ]


HANDLERS = (
    Handler("/v1/embeddings", parse_openai, openai_embeddings),
    Handler("/embed", parse_tei, tei_embed),
    Handler("/embed_all", parse_tei_tokens, tei_embed_all),
    Handler("/embed_sparse", parse_tei_tokens, tei_embed_sparse),
)
