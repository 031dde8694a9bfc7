"""The cross-encoder routes: TEI's `/rerank` and `/predict`, and Cohere's `/v1/rerank` and `/v2/rerank`
(the shape infinity and vLLM serve, and the cohere client reads): each parses its body, makes one call
into the service and shapes the answer as its API does."""

from __future__ import annotations

import uuid
from typing import Any

from bertlite.serve.endpoint import Handler
from bertlite.serve.schemas_rerank import (
    PredictRequest,
    RerankRequest,
    parse_cohere_rerank,
    parse_predict,
    parse_rerank,
)
from bertlite.serve.service import Service


async def tei_rerank(service: Service, req: RerankRequest) -> list[dict]:
    """[{index, score, text?}], best first."""
    ranked, _ = await service.rank(req, "/rerank")
    if req.return_text:
        return [{"index": i, "score": s, "text": req.texts[i]} for i, s in ranked]
    return [{"index": i, "score": s} for i, s in ranked]


def cohere_rerank(path: str) -> Any:
    """Cohere's rerank at path: {id, model, results: [{index, relevance_score, document?}], meta, usage};
    top_n over the number of documents returns them all, as Cohere does; up to --max-rerank-documents."""

    async def run(service: Service, req: RerankRequest) -> dict:
        ranked, tokens = await service.rank(req, path)
        results = []
        for i, score in ranked[: req.top_n]:
            result: dict[str, Any] = {"index": i, "relevance_score": score}
            if req.return_text:  # as given: an object's other fields too, as Cohere returns them
                result["document"] = req.documents[i] if req.documents is not None else {"text": req.texts[i]}
            results.append(result)
        return {
            "id": str(uuid.uuid4()),
            "model": service.model_name,
            "results": results,
            "meta": {
                "api_version": {"version": path[2]},
                "billed_units": {"search_units": 1},
                "tokens": {"input_tokens": tokens, "output_tokens": 0},
            },
            "usage": {"total_tokens": tokens},  # Jina's and vLLM's
        }

    return run


async def tei_predict(service: Service, req: PredictRequest) -> list:
    """Per input, [{label, score}] best first (Service.predict's scores); one input (a text or a pair)
    answers one such list, as TEI does."""
    scores, names = await service.predict(req)
    predictions = [
        [{"label": names[j], "score": float(row[j])} for j in sorted(range(len(row)), key=lambda j: -row[j])]
        for row in scores
    ]
    return predictions[0] if req.single else predictions


HANDLERS = (
    Handler("/rerank", parse_rerank, tei_rerank),
    Handler("/v1/rerank", parse_cohere_rerank, cohere_rerank("/v1/rerank")),
    Handler("/v2/rerank", parse_cohere_rerank, cohere_rerank("/v2/rerank")),
    Handler("/predict", parse_predict, tei_predict),
)
