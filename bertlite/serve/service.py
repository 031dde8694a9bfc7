"""What every route shares: the loaded job, its kind and routes, the limits, and the checks and
tokenizing every request's inputs go through before the worker runs them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tokenizers import Encoding

from bertlite.jobs.kinds import kind_of
from bertlite.serve.batching import Batcher
from bertlite.serve.schemas import RequestError
from bertlite.utils.text import SURROGATE

# The routes of each model type (a cross-encoder of one label is a reranker, of more a classifier).
ROUTES = {
    "embedding": ("/v1/embeddings", "/embed", "/embed_all"),
    "reranker": ("/rerank", "/v1/rerank", "/v2/rerank", "/predict"),
    "classifier": ("/predict",),
    "sparse": ("/embed_sparse",),
    "multi-vector": ("/embed_all",),
}
COMMON_ROUTES = ("/tokenize", "/decode")  # the tokenizer's: every model serves them
DESCRIPTIONS = {
    "embedding": "an embedding model",
    "reranker": "a reranker (a cross-encoder with one label)",
    "classifier": "a classifier (a cross-encoder with {labels} labels)",
    "sparse": "a sparse (SPLADE) embedding model",
    "multi-vector": "a multi-vector (ColBERT) model",
}
WRONG_MODEL = 424  # TEI's status for a route the loaded model cannot serve


class Service:
    """What the handlers share: the batcher, limits, key, metrics."""

    def __init__(self, batcher: Batcher, limits: Any, model_name: str, api_key: str | None) -> None:
        self.batcher = batcher
        self.limits = limits
        self.model_name = model_name
        self.api_key = api_key
        self.metrics = batcher.metrics
        self.in_flight = 0  # touched only on the event loop
        self.model_type = "embedding"  # set by prepare(): a key of ROUTES

    @property
    def job(self) -> Any:
        """The loaded job: an Embedder, CrossEncoder, SparseEncoder or MultiVectorEncoder."""
        return self.batcher.job

    def prepare(self, job: Any) -> Any:
        """Apply the limits to a freshly loaded job and learn its routes (in the worker thread, before it
        is ready)."""
        limit = job.bert.config.max_position_embeddings
        if self.limits.max_input_length is not None:
            if self.limits.max_input_length > limit:
                raise ValueError(
                    f"max_input_length={self.limits.max_input_length} exceeds the model's "
                    f"max_position_embeddings={limit}"
                )
            job.max_length = self.limits.max_input_length
        self.limits.max_input_length = job.max_length
        kind = kind_of(job)
        if kind == "cross-encoder":
            kind = "reranker" if job.num_labels == 1 else "classifier"
        self.model_type = kind
        return job

    @property
    def routes(self) -> tuple[str, ...]:
        """The routes the loaded model serves."""
        return ROUTES[self.model_type] + COMMON_ROUTES

    def describe(self) -> str:
        """What the model is, in words ("a reranker (...)")."""
        labels = self.job.num_labels if self.model_type == "classifier" else 0
        return DESCRIPTIONS[self.model_type].format(labels=labels)

    def check_route(self, path: str) -> None:
        """RequestError(424) when the loaded model cannot serve path, naming what it is and what it serves."""
        if path not in self.routes:
            raise RequestError(
                WRONG_MODEL,
                f"{path} is not served: the model is {self.describe()}; it serves {', '.join(self.routes)}",
                code="wrong_model_type",
            )

    def ready_job(self, path: str) -> Any:
        """The job, once loaded (else NotReadyError, a 503) and when it serves path (else the 424)."""
        self.batcher.check_ready()
        self.check_route(path)
        return self.job

    def check_inputs(
        self, texts: Sequence[str], field: str, count: int | None = None, *, documents: bool = False
    ) -> None:
        """413 for more inputs than --max-client-batch-size (count: how many the request holds, when not
        len(texts)) or one over --max-input-bytes; 422 for a lone surrogate; each naming `field`.
        documents: a rerank request's documents, bounded by --max-rerank-documents instead."""
        limits = self.limits
        count = len(texts) if count is None else count
        noun, limit = ("documents", "max_rerank_documents") if documents else ("inputs", "max_client_batch_size")
        if count > getattr(limits, limit):
            raise RequestError(
                413,
                f"{count} {noun} in one request, over --{limit.replace('_', '-')} {getattr(limits, limit)}",
                field,
                "too_many_inputs",
            )
        for i, text in enumerate(texts):
            if limits.max_input_bytes is not None:
                size = len(text.encode("utf-8", "surrogatepass"))
                if size > limits.max_input_bytes:
                    raise RequestError(
                        413,
                        f"input {i} is {size} bytes (UTF-8), over --max-input-bytes {limits.max_input_bytes}",
                        field,
                        "input_too_large",
                    )
            if surrogate := SURROGATE.search(text):
                raise RequestError(
                    422,
                    f"{field}[{i}] holds a lone surrogate (\\u{ord(surrogate.group()):04x}), which is not Unicode text",
                    field,
                    "invalid_request",
                )

    async def tokenize(
        self,
        texts: Sequence[Any],
        truncate: bool | None,
        field: str,
        tokenize: Callable[[list[Any]], list[Encoding]] | None = None,
    ) -> list[Encoding]:
        """The encodings the worker runs, truncated at the max input length; without truncate (the
        request's, else --auto-truncate), the 413 for the first input over it, with its token count.
        Off the event loop: a request of long texts takes a while to tokenize, and others must not wait.

        Args:
            texts: strings, or (a, b) pairs.
            truncate: the request's choice; None: the server's --auto-truncate.
            field: the request's field, for the 413.
            tokenize: the job's tokenize with the request's options bound; None: job.tokenize.
        """
        truncate = self.limits.auto_truncate if truncate is None else truncate
        run = tokenize or self.job.tokenize
        return await asyncio.get_running_loop().run_in_executor(None, self._tokenize, run, list(texts), truncate, field)

    def _tokenize(self, run: Callable, texts: list[Any], truncate: bool, field: str) -> list[Encoding]:
        encodings = run(texts)
        if not truncate:
            for i, e in enumerate(encodings):
                if e.overflowing:
                    text = texts[i]
                    count = self.job.count_tokens
                    n = count(text) if isinstance(text, str) else count(text[0]) + count(text[1]) - 1
                    raise RequestError(
                        413,
                        f"input {i} has {n} tokens, over the max input length of {self.limits.max_input_length} "
                        "(send shorter texts, or truncate: start the server with --auto-truncate)",
                        field,
                        "input_too_long",
                    )
        return encodings

    async def run(self, encodings: Sequence[Encoding], output: str | None = None) -> tuple[Any, int]:
        """(results, tokens): the worker's results for encodings (one item per encoding) and their tokens,
        counted in the metrics.

        A repeated input runs once and its copies share the result: the worker may run a request in
        several batches, and copies run in different ones could differ in their last bits and break a
        tie (a rerank's equal documents keep their order, as CrossEncoder.rank's do).
        """
        unique: list[Encoding] = []
        row_of: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        copy_of = []  # input -> row of `unique`
        for e in encodings:
            copy_of.append(row_of.setdefault((tuple(e.ids), tuple(e.type_ids)), len(unique)))
            if copy_of[-1] == len(unique):
                unique.append(e)
        results = await self.batcher.embed(unique, [len(e.ids) for e in unique], output)
        if len(unique) < len(encodings):
            results = results[copy_of] if isinstance(results, np.ndarray) else [results[i] for i in copy_of]
        tokens = sum(len(e.ids) for e in encodings)
        self.metrics.tokens.inc(tokens)
        return results, tokens
