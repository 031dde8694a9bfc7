"""What a request computes: one call per kind of request (embed, embed_all, embed_sparse, rank,
predict, tokenize_texts, decode), which readies the loaded job, checks the inputs against the limits,
tokenizes them off the event loop and awaits the worker. A route parses its body, makes that one call
and shapes the answer in its API's form (routes/); endpoint.py wraps every route."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tokenizers import Encoding

from bertlite.jobs.kinds import kind_of
from bertlite.jobs.tasks import job_task_index, with_task
from bertlite.serve.batching import Batcher
from bertlite.serve.schemas import EmbedRequest, RequestError
from bertlite.serve.schemas_rerank import PredictRequest, RerankRequest
from bertlite.serve.schemas_tokens import DecodeRequest, TokenizeRequest
from bertlite.utils.text import SURROGATE

# The routes of each model type (a cross-encoder of one label is a reranker, of more a classifier).
ROUTES = {
    "embedding": ("/v1/embeddings", "/embed", "/embed_all"),
    "reranker": ("/rerank", "/v1/rerank", "/v2/rerank", "/predict"),
    "classifier": ("/predict",),
    "sparse": ("/embed_sparse",),
    "multi-vector": ("/embed_all",),
    "m3": ("/v1/embeddings", "/embed", "/embed_sparse", "/embed_all"),
}
COMMON_ROUTES = ("/tokenize", "/decode")  # the tokenizer's: every model serves them
DESCRIPTIONS = {
    "embedding": "an embedding model",
    "reranker": "a reranker (a cross-encoder with one label)",
    "classifier": "a classifier (a cross-encoder with {labels} labels)",
    "sparse": "a sparse (SPLADE) embedding model",
    "multi-vector": "a multi-vector (ColBERT) model",
    "m3": "a BGE-M3 model (dense, sparse and multi-vector)",
}
WRONG_MODEL = 424  # TEI's status for a route the loaded model cannot serve


class Service:
    """The batcher, limits, key and metrics the routes share, and the one call each makes per request."""

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
        """The loaded job: an Embedder, CrossEncoder, SparseEncoder, MultiVectorEncoder or M3Encoder."""
        return self.batcher.job

    def prepare(self, job: Any) -> Any:
        """Apply the limits to a freshly loaded job and learn its routes (in the worker thread, before it
        is ready)."""
        limit = job.bert.config.max_sequence_length
        if self.limits.max_input_length is not None:
            if self.limits.max_input_length > limit:
                raise ValueError(
                    f"max_input_length={self.limits.max_input_length} exceeds the model's maximum of {limit} tokens "
                    f"(max_position_embeddings={job.bert.config.max_position_embeddings})"
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

    async def embed(self, req: EmbedRequest, path: str) -> tuple[np.ndarray, int]:
        """An OpenAI or TEI embedding request at path: (vectors, tokens), float32, cut to req.dimensions
        and L2-normalized when req.normalize.

        Raises:
            RequestError: 422 for dimensions over the model's, or what the inputs' checks raise.
        """
        embedder = self._ready_job(path)
        field = "input" if path.startswith("/v1/") else "inputs"
        if req.ids is not None:
            encodings = self._id_encodings(req)
        else:
            texts = self._with_prompt(req, field)
        if req.dimensions is not None and req.dimensions > embedder.dimension:
            raise RequestError(
                422, f"dimensions: {req.dimensions} is more than the model's {embedder.dimension}", "dimensions"
            )
        try:
            task = job_task_index(embedder, req.task)
        except ValueError as e:
            raise RequestError(422, f"task: {e}", "task", "invalid_request") from e
        if req.ids is None:
            encodings = await self._encode(texts, req.truncate, field)
        vectors, tokens = await self._run(with_task(list(encodings), task))
        if req.dimensions is not None:
            vectors = vectors[:, : req.dimensions]
        if req.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors.astype(np.float32, copy=False), tokens

    async def embed_all(self, req: EmbedRequest) -> list[np.ndarray]:
        """Per input, a float32 vector per token: an Embedder's token embeddings ([CLS] and [SEP]
        included), a multi-vector model's kept tokens' vectors (req.is_query: tokenized as queries,
        else documents), or a BGE-M3 model's ColBERT vectors (every token but the first; queries and
        documents alike)."""
        job = self._ready_job("/embed_all")
        if self.model_type == "m3":
            texts = self._with_prompt(req, "inputs")
            rows, _ = await self._run(await self._encode(texts, req.truncate, "inputs"), "colbert_vecs")
        elif self.model_type == "multi-vector":
            self._check_inputs(req.texts, "inputs")
            # None: the query or document prompt the model's encodings() picks
            prompt = None if req.prompt is None and req.prompt_name is None else self._prompt(req)
            encodings = await self._encode(
                req.texts,
                req.truncate,
                "inputs",
                lambda texts: job.encodings(texts, is_query=req.is_query, prompt=prompt),
            )
            rows, _ = await self._run(encodings)  # queries and documents differ in their tokens only
        else:
            if req.is_query:
                raise RequestError(
                    422, "is_query: only for a multi-vector model; this is an embedding model", "is_query"
                )
            texts = self._with_prompt(req, "inputs")
            rows, _ = await self._run(await self._encode(texts, req.truncate, "inputs"), "token_embeddings")
        return [np.asarray(row, dtype=np.float32) for row in rows]

    async def embed_sparse(self, req: EmbedRequest) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per input, the (indices, values) of its non-zero dimensions, indices ascending."""
        self._ready_job("/embed_sparse")
        texts = self._with_prompt(req, "inputs")
        output = "sparse" if self.model_type == "m3" else None  # BGE-M3's lexical weights; SPLADE's vectors
        rows, _ = await self._run(await self._encode(texts, req.truncate, "inputs"), output)
        return rows

    async def rank(self, req: RerankRequest, path: str) -> tuple[list[tuple[int, float]], int]:
        """A rerank request at path: (index, score) of every text, best first (ties in input order), and
        the tokens run. Scores are CrossEncoder.rank's (the checkpoint's activation on the logits), or
        the logits with raw_scores."""
        job = self._ready_job(path)
        field = "texts" if path == "/rerank" else "documents"
        self._check_inputs([req.query], "query")
        self._check_inputs(req.texts, field, documents=True)
        pairs = [(req.query, text) for text in req.texts]
        # The query is tokenized once and paired with each document's tokens, not read once per document.
        encodings = await self._encode(
            pairs, req.truncate, field, lambda pairs: job.tokenize_pairs(pairs[0][0], [d for _, d in pairs])
        )
        logits, tokens = await self._run(encodings)
        scores = np.asarray(logits if req.raw_scores else job.activation(logits), dtype=np.float32)
        scores = scores.reshape(len(logits), -1)
        order = sorted(range(len(req.texts)), key=lambda i: -scores[i, 0])
        return [(i, float(scores[i, 0])) for i in order], tokens

    async def predict(self, req: PredictRequest) -> tuple[np.ndarray, list[str]]:
        """A classification request: (scores, the label names), a row of scores per input, as
        CrossEncoder.predict(apply_softmax=True) gives them (the checkpoint's activation, then a softmax
        over more than one label), or the logits with raw_scores."""
        job = self._ready_job("/predict")
        texts = [t for item in req.inputs for t in ((item,) if isinstance(item, str) else item)]
        self._check_inputs(texts, "inputs", count=len(req.inputs))
        logits, _ = await self._run(await self._encode(req.inputs, req.truncate, "inputs"))
        scores = np.asarray(logits if req.raw_scores else job.activation(logits), dtype=np.float32)
        scores = scores.reshape(len(logits), -1)
        if not req.raw_scores and scores.shape[1] > 1:
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores = shifted / shifted.sum(axis=1, keepdims=True)
        return scores, labels(job, scores.shape[1])

    async def tokenize_texts(self, req: TokenizeRequest) -> tuple[list[str], list[Encoding]]:
        """A tokenize request: the texts as tokenized (the prompt req.prompt_name names before each) and
        their encodings, truncated at the max input length."""
        job = self._ready_job("/tokenize")
        self._check_inputs(req.texts, "inputs")
        texts = req.texts
        if req.prompt_name is not None:
            prompts = getattr(job, "prompts", {})
            if req.prompt_name not in prompts:
                known = ", ".join(map(repr, prompts)) or "none"
                raise RequestError(
                    422, f"prompt_name: {req.prompt_name!r} is not one of the model's prompts ({known})", "prompt_name"
                )
            texts = [prompts[req.prompt_name] + text for text in texts]
        encode = job.backend_tokenizer.encode_batch
        encodings = await asyncio.get_running_loop().run_in_executor(
            None, lambda: encode(texts, add_special_tokens=req.add_special_tokens)
        )
        return texts, encodings

    def decode(self, req: DecodeRequest) -> list[str]:
        """A decode request: per sequence of ids, its text (422 for an id outside the vocabulary)."""
        job = self._ready_job("/decode")
        self._check_inputs([], "ids", count=len(req.ids))
        vocab = job.backend_tokenizer.get_vocab_size()
        for i, ids in enumerate(req.ids):
            if ids and (top := max(ids)) >= vocab:
                raise RequestError(422, f"ids[{i}]: token id {top} is not below the vocabulary size {vocab}", "ids")
        return job.backend_tokenizer.decode_batch(req.ids, skip_special_tokens=req.skip_special_tokens)

    def _ready_job(self, path: str) -> Any:
        """The job, once loaded (else NotReadyError, a 503) and when it serves path (else the 424)."""
        self.batcher.check_ready()
        self.check_route(path)
        return self.job

    def _check_inputs(
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

    async def _encode(
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
            tokenize: the job's tokenize with the request's options bound; None: job.encodings.
        """
        truncate = self.limits.auto_truncate if truncate is None else truncate
        run = tokenize or self.job.encodings
        return await asyncio.get_running_loop().run_in_executor(
            None, self._encode_now, run, list(texts), truncate, field
        )

    def _encode_now(self, run: Callable, texts: list[Any], truncate: bool, field: str) -> list[Encoding]:
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

    async def _run(self, encodings: Sequence[Encoding], output: str | None = None) -> tuple[Any, int]:
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

    def _with_prompt(self, req: EmbedRequest, field: str) -> list[str]:
        """The texts, checked, with the job's prompt (the request's, else the model's default) before each."""
        self._check_inputs(req.texts, field)
        prompt = self._prompt(req)
        return [prompt + text for text in req.texts] if prompt else req.texts

    def _prompt(self, req: EmbedRequest) -> str:
        """The request's prompt (prompt, else the model's prompts[prompt_name], else its default)."""
        try:
            prompt = self.job.resolve_prompt(req.prompt, req.prompt_name)
        except ValueError as e:
            raise RequestError(422, str(e), "prompt_name", "invalid_request") from e
        if surrogate := SURROGATE.search(prompt):
            raise RequestError(422, f"prompt holds a lone surrogate (\\u{ord(surrogate.group()):04x})", "prompt")
        return prompt

    def _id_encodings(self, req: EmbedRequest) -> list[TokenIds]:
        """Token-id inputs as the worker runs them, as given (special tokens are the client's to send):
        each id below the vocabulary size, each input within the max input length (else 413)."""
        if req.prompt is not None or req.prompt_name is not None:
            raise RequestError(422, "prompt: applies to text; token ids are run as given", "prompt")
        self._check_inputs([], "input", count=len(req.ids))
        vocab = self.job.bert.config.vocab_size
        limit = self.limits.max_input_length
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
                    422,
                    f"input {i}: token id {top} is not below the vocabulary size {vocab}",
                    "input",
                    "invalid_request",
                )
        return [TokenIds(ids) for ids in req.ids]


class TokenIds:
    """An input given as token ids, with what the jobs read of a tokenizers.Encoding."""

    overflowing: list = []  # noqa: RUF012 (never written: nothing was cut)

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.type_ids = [0] * len(ids)
        self.attention_mask = [1] * len(ids)


def labels(job: Any, count: int) -> list[str]:
    """The checkpoint's label names by id (config.id2label), LABEL_i where it names none."""
    config = getattr(job, "config", None) or job.model.config
    id2label = getattr(config, "id2label", None) or {}
    return [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(count)]
