"""The cross-encoder routes: TEI's `/rerank` and `/predict`, and Cohere's `/v1/rerank` and `/v2/rerank`
(the shape infinity and vLLM serve, and the cohere client reads)."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from bertlite.serve.endpoint import Handler
from bertlite.serve.schemas_rerank import (
    PredictRequest,
    RerankRequest,
    parse_cohere_rerank,
    parse_predict,
    parse_rerank,
)
from bertlite.serve.service import Service


async def _ranked(service: Service, req: RerankRequest, path: str) -> tuple[list[tuple[int, float]], int]:
    """(index, score) of every text, best first (ties in input order), and the tokens run. Scores are
    CrossEncoder.rank's (the checkpoint's activation on the logits), or the logits with raw_scores."""
    job = service.ready_job(path)
    field = "texts" if path == "/rerank" else "documents"
    service.check_inputs([req.query], "query")
    service.check_inputs(req.texts, field, documents=True)
    pairs = [(req.query, text) for text in req.texts]
    # The query is tokenized once and paired with each document's tokens, not read once per document.
    encodings = await service.tokenize(
        pairs, req.truncate, field, lambda pairs: job.tokenize_pairs(pairs[0][0], [d for _, d in pairs])
    )
    logits, tokens = await service.run(encodings)
    scores = np.asarray(logits if req.raw_scores else job.activation(logits), dtype=np.float32).reshape(len(logits), -1)
    order = sorted(range(len(req.texts)), key=lambda i: -scores[i, 0])
    return [(i, float(scores[i, 0])) for i in order], tokens


async def tei_rerank(service: Service, req: RerankRequest) -> list[dict]:
    """[{index, score, text?}], best first."""
    ranked, _ = await _ranked(service, req, "/rerank")
    if req.return_text:
        return [{"index": i, "score": s, "text": req.texts[i]} for i, s in ranked]
    return [{"index": i, "score": s} for i, s in ranked]


def cohere_rerank(path: str) -> Any:
    """Cohere's rerank at path: {id, model, results: [{index, relevance_score, document?}], meta, usage};
    top_n over the number of documents returns them all, as Cohere does; up to --max-rerank-documents."""

    async def run(service: Service, req: RerankRequest) -> dict:
        ranked, tokens = await _ranked(service, req, path)
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
    """Per input, [{label, score}] best first: the scores are CrossEncoder.predict(apply_softmax=True)'s
    (the checkpoint's activation, then a softmax over more than one label), or the logits with
    raw_scores; one input (a text or a pair) answers one such list, as TEI does."""
    job = service.ready_job("/predict")
    texts = [t for item in req.inputs for t in ((item,) if isinstance(item, str) else item)]
    service.check_inputs(texts, "inputs", count=len(req.inputs))
    logits, _ = await service.run(await service.tokenize(req.inputs, req.truncate, "inputs"))
    scores = np.asarray(logits if req.raw_scores else job.activation(logits), dtype=np.float32).reshape(len(logits), -1)
    if not req.raw_scores and scores.shape[1] > 1:
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        scores = shifted / shifted.sum(axis=1, keepdims=True)
    names = labels(job, scores.shape[1])
    predictions = [
        [{"label": names[j], "score": float(row[j])} for j in sorted(range(len(row)), key=lambda j: -row[j])]
        for row in scores
    ]
    return predictions[0] if req.single else predictions


def labels(job: Any, count: int) -> list[str]:
    """The checkpoint's label names by id (config.id2label), LABEL_i where it names none."""
    config = getattr(job, "config", None) or job.model.config
    id2label = getattr(config, "id2label", None) or {}
    return [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(count)]


HANDLERS = (
    Handler("/rerank", parse_rerank, tei_rerank),
    Handler("/v1/rerank", parse_cohere_rerank, cohere_rerank("/v1/rerank")),
    Handler("/v2/rerank", parse_cohere_rerank, cohere_rerank("/v2/rerank")),
    Handler("/predict", parse_predict, tei_predict),
)
