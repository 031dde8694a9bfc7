"""Pairs to scores: a BertForSequenceClassification on the packed path. `CrossEncoder.predict` and `.rank`.

The scores are those sentence_transformers.CrossEncoder(...).predict gives for the same folder: the
classifier on the pooler output, then the folder's activation (Sigmoid for one label, else Identity,
unless the folder names another), without importing sentence-transformers or transformers.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor, nn

from bertlite.config import BertConfig
from bertlite.jobs.base import (
    BaseEncoder,
    EncodeStats,
    check_count,
    check_text,
    progress_bar,
    with_prompt,
)
from bertlite.jobs.pairs import PairIds, QueryPairs
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.st_config import read_cross_encoder_settings
from bertlite.models.heads import BertForSequenceClassification
from bertlite.utils.warn import warn_user

__all__ = ["CrossEncoder", "resolve_activation"]

Pair = tuple[str, str] | list[str]


class CrossEncoder(BaseEncoder):
    """A BertForSequenceClassification and its tokenizer: (query, document) pairs in, scores out."""

    def __init__(
        self,
        model: BertForSequenceClassification,
        tokenizer: Tokenizer,
        *,
        max_length: int | None = None,
        unpad: bool = True,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        pack_weights: bool = True,
    ) -> None:
        """Wrap a loaded model and tokenizer; CrossEncoder.from_pretrained builds both from a folder.

        Args:
            model: the BertForSequenceClassification to run (its pooler and classifier give the logits).
            tokenizer: its tokenizer; a copy is kept, as in BaseEncoder.
            max_length: tokens per pair, longer pairs truncated longest text first; None: the model's
                max_position_embeddings.
            unpad: run packed batches (real tokens only); False: padded batches, as transformers runs them.
            activation_fn: applied to the logits by predict() and rank(); None: Sigmoid for one label,
                else Identity (sentence-transformers' default).
            prompts: text put before the first text of every pair, by name; None: none.
            default_prompt_name: the prompt that applies unless predict() is given prompt or prompt_name.
            pack_weights: see BaseEncoder.

        Raises:
            TypeError: a model without a classifier on the pooler output.
            ValueError: a default_prompt_name not in prompts.
        """
        if not isinstance(model, BertForSequenceClassification):
            raise TypeError(f"CrossEncoder runs a BertForSequenceClassification, got {type(model).__name__}")
        super().__init__(model, tokenizer, max_length=max_length, unpad=unpad, pack_weights=pack_weights)
        self.activation_fn = activation_fn if activation_fn is not None else default_activation(self.num_labels)
        self._set_prompts(prompts, default_prompt_name)
        self._query_pairs: QueryPairs | None = None  # built on first use, again once max_length changes

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = "auto",
        quantize: str | None = None,
        max_length: int | None = None,
        unpad: bool = True,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        allow_nonfinite: bool = False,
        pack_weights: bool = True,
        **hub_kwargs: Any,
    ) -> CrossEncoder:
        """Load a cross-encoder (a sequence-classification checkpoint) from one folder or hub id.

        Reads what sentence_transformers.CrossEncoder reads: the activation from
        config_sentence_transformers.json (else config.json's sentence_transformers.activation_fn or
        sbert_ce_default_activation_function), the max length from sentence_bert_config.json (else
        tokenizer_config.json), the prompts. A plain transformers folder of a
        BertForSequenceClassification loads too.

        Args:
            name_or_path: a local checkpoint folder or a hub id.
            device: where the model runs; None: the CPU.
            dtype: "auto", None (float32), a dtype or its name, as Embedder.from_pretrained; "int8": as
                quantize="int8".
            quantize: "int8": load float32, then bertlite.quant.int8.quantize_int8; None: no quantization.
            max_length: as in __init__; None: the folder's, else the model's max_position_embeddings.
            unpad: see __init__.
            activation_fn: as in __init__; None: the folder's, else the default.
            allow_nonfinite: load weights holding NaN or Inf (with a warning).
            pack_weights: see __init__.
            **hub_kwargs: hub options (revision, cache_dir, token, local_files_only, ...).

        Returns:
            The CrossEncoder.

        Raises:
            ValueError: a checkpoint that is not a sequence-classification model (an embedding model,
                say), a device this machine cannot use, an unknown dtype or quantize.
        """
        options = LoadOptions.check(quantize, dtype, device, allow_nonfinite, hub_kwargs)
        settings = read_cross_encoder_settings(name_or_path, **hub_kwargs)
        config = BertConfig.from_pretrained(name_or_path, **hub_kwargs)
        architectures = config.extra.get("architectures") or []
        if architectures and not str(architectures[0]).endswith("ForSequenceClassification"):
            raise ValueError(
                f"{name_or_path} is a {architectures[0]} checkpoint without a classifier, not a cross-encoder "
                "(sequence-classification) model; for embeddings use bertlite.Embedder"
            )
        model, tokenizer = options.load(_load_classifier, name_or_path, config)
        if activation_fn is None:
            activation_fn = folder_activation(name_or_path, settings.activation_fn, config.extra)
        return cls(
            model,
            tokenizer,
            max_length=max_length if max_length is not None else settings.max_length,
            unpad=unpad,
            activation_fn=activation_fn,
            prompts=settings.prompts,
            default_prompt_name=settings.default_prompt_name,
            pack_weights=pack_weights,
        )

    @property
    def config(self) -> BertConfig:
        """The model's config (id2label gives the labels' names)."""
        return self.model.config

    @property
    def num_labels(self) -> int:
        """Scores per pair: 1 for a reranker, the classes for a classifier (3 for NLI, say)."""
        return self.model.config.num_labels

    def activation(self, logits: np.ndarray | Tensor) -> np.ndarray | Tensor:
        """The checkpoint's activation_fn on raw logits, as sentence-transformers' predict applies it.

        Args:
            logits: (n, num_labels) logits from encode_tokenized, a numpy array or a tensor.

        Returns:
            The activated scores, float32, of the same shape and kind.
        """
        if isinstance(logits, np.ndarray):
            return self.activation_fn(torch.from_numpy(logits).float()).numpy()
        return self.activation_fn(logits.float())

    def tokenize_pairs(self, query: str, documents: Sequence[str], first_index: int = 0) -> list[PairIds]:
        """The pairs (query, document) of each document, the query tokenized once: the same ids as
        tokenize() gives each pair, read only as far as truncation at max_length needs.

        Args:
            query: the first text of every pair (prompt included, if any).
            documents: the second texts.
            first_index: index of documents[0] in the caller's input, for error messages.

        Returns:
            One encoding per document, in order, for encode_tokenized.

        Raises:
            ValueError: a query or document that is not a str, or holds a lone surrogate.
        """
        check_text(query, first_index)
        for i, document in enumerate(documents):
            if not isinstance(document, str):
                raise ValueError(f"texts[{first_index + i}] is {type(document).__name__}; each document must be a str")
            check_text(document, first_index + i)
        pairs = self._query_pairs
        if pairs is None or pairs.truncation != self.tokenizer.truncation:
            pairs = self._query_pairs = QueryPairs(self.tokenizer, self._cutter)
        return pairs.encode(query, documents)

    def encode_tokenized(
        self, encodings: Sequence[Encoding], batch_size: int | None = None, *, max_tokens: int | None = None
    ) -> np.ndarray:
        """The raw logits of pairs that tokenize() has already turned into encodings.

        Args:
            encodings: tokenize()'s or tokenize_pairs()' output for (query, document) pairs (prompt included).
            batch_size, max_tokens: as in Embedder.encode: with neither, the packed path batches by a
                token budget and the padded path by 32 pairs.

        Returns:
            float32 logits (n, num_labels), no activation, in input order.
        """
        return self._logits(list(encodings), batch_size, max_tokens, show_progress_bar=False).numpy()

    def predict(
        self,
        inputs: Sequence[Pair] | Pair,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        apply_softmax: bool = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        *,
        max_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> np.ndarray | Tensor | list[Tensor] | np.float32:
        """Score (query, document) pairs, as sentence_transformers.CrossEncoder.predict.

        Args:
            inputs: pairs of str (tuples or lists), or one pair, which gives one score.
            batch_size: caps pairs per batch; None: the token budget of encode_tokenized (the scores
                do not depend on it).
            show_progress_bar: a tqdm bar on stderr; None: shown when stderr is a terminal.
            activation_fn: for this call instead of the CrossEncoder's.
            apply_softmax: softmax over the labels of each pair (only with num_labels > 1).
            convert_to_numpy: a numpy array; False: a list of tensors.
            convert_to_tensor: one tensor (wins over convert_to_numpy).
            max_tokens: caps batch size x longest pair.
            prompt_name, prompt: text put before each pair's first text, as sentence-transformers;
                None: the default prompt, if any.

        Returns:
            float32 scores: (n,) for one label, (n, num_labels) for more; for one pair, its score (a
            numpy scalar, or a row).

        Raises:
            ValueError: a pair that is not two str, a pair with an empty text (naming its index), a bad
                batch_size or max_tokens, an unknown prompt_name.
        """
        single = isinstance(inputs, list | tuple) and len(inputs) > 0 and not isinstance(inputs[0], list | tuple)
        pairs = [inputs] if single else list(inputs)
        check_pairs(pairs)
        pairs = with_prompt(pairs, self.resolve_prompt(prompt, prompt_name))
        if not pairs:
            scores = torch.empty(0)  # sentence-transformers gives an empty 1-d result, whatever num_labels
        else:
            encodings = self.tokenize(pairs)
            scores = self._scores(self._logits(encodings, batch_size, max_tokens, show_progress_bar), activation_fn)
            if apply_softmax and scores.ndim > 1:
                scores = torch.softmax(scores, dim=1)
        if convert_to_tensor:
            result: Any = scores
        elif convert_to_numpy:
            result = scores.numpy()
        else:
            result = list(scores)
        return result[0] if single else result

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        *,
        max_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> list[dict[str, Any]]:
        """Rank documents by their score with the query, as sentence_transformers.CrossEncoder.rank.
        The query is tokenized once (tokenize_pairs), not once per document.

        Args:
            query: the query.
            documents: the documents.
            top_k: keep the best top_k (more than there are keeps all); None: all.
            return_documents: add each document's text under "text".
            batch_size, show_progress_bar, activation_fn, max_tokens, prompt_name, prompt: as in predict().

        Returns:
            {"corpus_id": index into documents, "score": float[, "text": str]} per document, best first;
            equal scores keep the documents' order.

        Raises:
            ValueError: a model with more than one label, top_k below 1, an empty query or document
                (naming its index), or what predict() refuses.
        """
        if self.num_labels != 1:
            raise ValueError(
                f"rank() needs a model with num_labels=1, this one has {self.num_labels}; use predict() on the pairs"
            )
        check_count("top_k", top_k, none="all documents")
        if not isinstance(query, str) or not query:
            raise ValueError(f"query must be a non-empty str, got {query!r:.40}")
        documents = list(documents)
        for i, document in enumerate(documents):
            if not isinstance(document, str) or not document:
                raise ValueError(f"documents[{i}] must be a non-empty str, got {document!r:.40}")
        if not documents:
            return []
        encodings = self.tokenize_pairs(self.resolve_prompt(prompt, prompt_name) + query, documents)
        logits = self._logits(encodings, batch_size, max_tokens, show_progress_bar)
        scores = self._scores(logits, activation_fn).tolist()
        results = [{"corpus_id": i, "score": score} for i, score in enumerate(scores)]
        if return_documents:
            for result in results:
                result["text"] = documents[result["corpus_id"]]
        # sorted() is stable, so equal scores keep input order, as in sentence-transformers
        return sorted(results, key=lambda result: result["score"], reverse=True)[:top_k]

    def _scores(self, logits: Tensor, activation_fn: Callable[[Tensor], Tensor] | None) -> Tensor:
        """Activation, then (n, 1) -> (n,), in sentence-transformers' order."""
        scores = (activation_fn or self.activation_fn)(logits)
        return scores.squeeze(-1) if self.num_labels == 1 and scores.ndim > 1 else scores

    def _logits(
        self, encodings: list[Encoding], batch_size: int | None, max_tokens: int | None, show_progress_bar: bool | None
    ) -> Tensor:
        """(n, num_labels) float32 logits in input order; a repeated pair is run once.

        A pair's last bits depend on where it sits in a packed batch, so two copies run apart could
        differ by an ulp and break a tie; run once, they tie exactly, and rank() keeps their input order
        as sentence-transformers does.
        """
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        stats = self.last_stats = EncodeStats(texts=len(encodings))
        unique: list[Encoding] = []
        row_of: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        copy_of = []  # input row -> row of `unique`
        for e in encodings:
            copy_of.append(row_of.setdefault((tuple(e.ids), tuple(e.type_ids)), len(unique)))
            if copy_of[-1] == len(unique):
                unique.append(e)
        logits = torch.empty(len(unique), self.num_labels, dtype=torch.float32)
        progress = progress_bar(len(unique), show_progress_bar)
        try:
            for rows, batch_logits in self._run_sorted(unique, batch_size, max_tokens, stats):
                logits[rows] = batch_logits
                progress.update(len(rows))
        finally:
            progress.close()
        return logits[copy_of]

    @torch.inference_mode()
    def _run_packed(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        out, _ = self.forward_packed(encodings, device, first_tokens_only=True)  # the pooler reads [CLS] only
        return self._classify(out.pooler_output[: len(encodings)])

    @torch.inference_mode()
    def _run_padded(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        out, _ = self.forward_padded(encodings, device)
        return self._classify(out.pooler_output)

    def _classify(self, pooled: Tensor) -> Tensor:
        """BertForSequenceClassification's head on (B, H) pooler outputs: (B, num_labels) float32 on the CPU."""
        return self.model.classifier(self.model.dropout(pooled)).float().cpu()


def _load_classifier(name_or_path: str | os.PathLike, **kwargs: Any) -> BertForSequenceClassification:
    """BertForSequenceClassification.from_pretrained, refusing a checkpoint without classifier weights (which
    it would initialise freshly)."""
    model, info = BertForSequenceClassification.from_pretrained(name_or_path, output_loading_info=True, **kwargs)
    if any(key.startswith("classifier.") for key in info["missing_keys"]):
        raise ValueError(
            f"{name_or_path} has no classifier weights, so it is not a cross-encoder (sequence-classification) "
            "model; for embeddings use bertlite.Embedder"
        )
    return model


def check_pairs(pairs: Sequence[object]) -> None:
    """Each item a pair of two non-empty str.

    Raises:
        ValueError: naming inputs[i] and what is wrong.
    """
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise ValueError(f"inputs[{i}] is {type(pair).__name__} {pair!r:.40}; each input must be a pair of str")
        for side, text in zip(("first (query)", "second (document)"), pair, strict=True):
            if not text:
                raise ValueError(f"inputs[{i}] has an empty {side} text; a pair needs two non-empty texts")


def default_activation(num_labels: int) -> nn.Module:
    """sentence-transformers' default: Sigmoid for one label (a relevance score), else Identity (logits)."""
    return nn.Sigmoid() if num_labels == 1 else nn.Identity()


def folder_activation(name: str | os.PathLike, st_path: str | None, config_extra: dict[str, Any]) -> nn.Module | None:
    """The activation a folder names, in sentence-transformers' order; None: the default.

    config_sentence_transformers.json's activation_fn first, then config.json's
    sentence_transformers.activation_fn, else its older sbert_ce_default_activation_function.
    """
    if st_path is not None and (found := resolve_activation(st_path, name)) is not None:
        return found
    st_section = config_extra.get("sentence_transformers")
    if isinstance(st_section, dict) and "activation_fn" in st_section:
        path = st_section["activation_fn"]
    else:
        path = config_extra.get("sbert_ce_default_activation_function")
    return resolve_activation(path, name) if isinstance(path, str) else None


def resolve_activation(path: str, name: str | os.PathLike = "the checkpoint") -> nn.Module | None:
    """An activation module from its dotted path (e.g. "torch.nn.modules.activation.Sigmoid"), built without
    arguments.

    Only torch's are built, as sentence-transformers does without trust_remote_code; another path warns
    and gives None (the default activation).

    Raises:
        ValueError: a torch path that names no class.
    """
    if not path.startswith("torch."):
        warn_user(f"{name}: activation_fn {path!r} is not a torch module; using the default activation")
        return None
    module_path, _, attr = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_path), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{name}: activation_fn {path!r} names no torch class") from e
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise ValueError(f"{name}: activation_fn {path!r} is not a torch.nn.Module class")
    return found()
