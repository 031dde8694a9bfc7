"""Pairs to scores: a BertForSequenceClassification on the packed path. `CrossEncoder.predict` and `.rank`.

The scores are those sentence_transformers.CrossEncoder(...).predict gives for the same folder: the
classifier on the pooler output, then the folder's activation (Sigmoid for one label, else Identity,
unless the folder names another), without importing sentence-transformers or transformers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor, nn

from bertlite.config import CONFIG_CLASSES, BertConfig
from bertlite.jobs import bars
from bertlite.jobs.activation import default_activation, folder_activation, resolve_activation, untrusted_activation
from bertlite.jobs.base import (
    BaseEncoder,
    EncodeStats,
    check_count,
    check_text,
    on_whole_blocks,
    progress_bar,
    with_prompt,
)
from bertlite.jobs.inputs import PAIRS, check_texts
from bertlite.jobs.pairs import PairIds, QueryPairs
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.st.base import LoadingKeywords, STBase, check_wrapped
from bertlite.jobs.st.folders import read_cross_encoder_settings
from bertlite.jobs.st.keywords import arrays_as_lists, classifier_dropout, renamed_keywords
from bertlite.jobs.st.logs import logger
from bertlite.jobs.st.names import CROSS_ENCODER_ORGANIZATION
from bertlite.jobs.st.processing import takes_processing_kwargs
from bertlite.layers.packing import PackedLayout
from bertlite.models.auto import AutoModelForSequenceClassification, read_model_type
from bertlite.models.deberta_v2_heads import DebertaV2ForSequenceClassification
from bertlite.models.eurobert_heads import EuroBertForSequenceClassification
from bertlite.models.gte_heads import GteForSequenceClassification
from bertlite.models.heads import BertForSequenceClassification
from bertlite.models.jina_embeddings_v3_heads import JinaEmbeddingsV3ForSequenceClassification
from bertlite.models.modernbert_heads import ModernBertForSequenceClassification
from bertlite.models.nomic_bert_heads import NomicBertForSequenceClassification
from bertlite.utils.warn import warn_user

__all__ = ["CrossEncoder", "STBase", "resolve_activation"]

Pair = tuple[str, str] | list[str]
# Keywords sentence-transformers' CrossEncoder.rank accepts and ignores (deprecated there).
IGNORED_RANK_KWARGS = ("convert_to_numpy", "convert_to_tensor", "apply_softmax", "num_workers")


class CrossEncoder(STBase, BaseEncoder):
    """A BertForSequenceClassification and its tokenizer: (query, document) pairs in, scores out."""

    default_huggingface_organization = CROSS_ENCODER_ORGANIZATION

    @renamed_keywords(
        automodel_args="model_kwargs",
        tokenizer_args="processor_kwargs",
        tokenizer_kwargs="processor_kwargs",
        config_args="config_kwargs",
        cache_dir="cache_folder",
    )
    @classifier_dropout
    def __init__(
        self,
        model_name_or_path: str | os.PathLike | BertForSequenceClassification,
        tokenizer: Tokenizer | None = None,
        *,
        max_length: int | None = None,
        unpad: bool = True,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        pack_weights: bool = True,
        num_labels: int | None = None,
        device: torch.device | str | None = None,
        cache_folder: str | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        local_files_only: bool = False,
        token: bool | str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        use_kernels: bool = False,
        kernel_config: Any = None,
        backend: str = "torch",
    ) -> None:
        """Load a cross-encoder by name or path, as sentence_transformers.CrossEncoder(...) does, or wrap a
        loaded model and tokenizer.

        CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2", device=..., model_kwargs={"dtype": ...}) reads
        the folder as from_pretrained does (a bare name is looked up under cross-encoder/, as
        sentence-transformers does); explicit max_length, activation_fn and default_prompt_name win over the
        folder's, and prompts are added to the folder's.

        Args:
            model_name_or_path: a folder, hub id or bare name; or the BertForSequenceClassification to run
                (its pooler and classifier give the logits), with its tokenizer.
            tokenizer: the model's tokenizer (a copy is kept, as in BaseEncoder); None when loading by name.
            max_length: tokens per pair, longer pairs truncated longest text first; None: the folder's,
                else the model's max_position_embeddings.
            unpad: run packed batches (real tokens only); False: padded batches, as transformers runs them.
            activation_fn: applied to the logits by predict() and rank(); None: the folder's, else Sigmoid
                for one label, else Identity (sentence-transformers' default).
            prompts: text put before the first text of every pair, by name; None: none (the folder's).
            default_prompt_name: the prompt that applies unless predict() is given prompt or prompt_name.
            pack_weights: see BaseEncoder.
            num_labels: the labels the checkpoint must have (bertlite does not build a fresh classifier);
                None: its own.
            device: where the model runs; None: CUDA, else MPS, else the CPU (st.base.default_device, as
                sentence-transformers). With a model: moved there (to()); None: where it is.
            cache_folder, trust_remote_code, revision, local_files_only, token, model_kwargs,
                processor_kwargs, config_kwargs, use_kernels, kernel_config, backend: sentence-transformers'
                loading options (bertlite.jobs.st.base.LoadingKeywords: model_kwargs' dtype is
                from_pretrained's dtype; trust_remote_code=True and the options bertlite lacks are refused).

        Raises:
            TypeError: a model without a classifier on the pooler output; a tokenizer missing with a model,
                or given with a name; loading options given with a model.
            ValueError: a default_prompt_name not in prompts; num_labels other than the checkpoint's; what
                LoadingKeywords and from_pretrained refuse.
        """
        loading = LoadingKeywords.of(locals())
        if isinstance(model_name_or_path, nn.Module):
            model = model_name_or_path
            check_wrapped(tokenizer, loading)
        else:
            model, tokenizer, folder = self._load_by_name(model_name_or_path, tokenizer, loading)
            if trust_remote_code and activation_fn is None and folder["untrusted_activation"] is not None:
                # The user asked for the folder's own activation, which bertlite would silently replace.
                raise ValueError(
                    f"trust_remote_code=True: {model_name_or_path}'s activation_fn {folder['untrusted_activation']!r} "
                    "is code bertlite does not run (it builds torch's activations only); load without "
                    "trust_remote_code for the default activation"
                )
            max_length = max_length if max_length is not None else folder["max_length"]
            activation_fn = activation_fn if activation_fn is not None else folder["activation_fn"]
            prompts = {**(folder["prompts"] or {}), **(prompts or {})}
            default_prompt_name = (
                default_prompt_name if default_prompt_name is not None else folder["default_prompt_name"]
            )
        classifiers = (
            BertForSequenceClassification,
            DebertaV2ForSequenceClassification,
            EuroBertForSequenceClassification,
            GteForSequenceClassification,
            JinaEmbeddingsV3ForSequenceClassification,
            ModernBertForSequenceClassification,
            NomicBertForSequenceClassification,
        )
        if not isinstance(model, classifiers):
            raise TypeError(f"CrossEncoder runs a BertForSequenceClassification, got {type(model).__name__}")
        if num_labels is not None and num_labels != model.config.num_labels:
            raise ValueError(
                f"num_labels={num_labels}: the checkpoint's classifier has {model.config.num_labels} labels, and "
                "bertlite does not build a fresh classifier; leave num_labels unset"
            )
        super().__init__(model, tokenizer, max_length=max_length, unpad=unpad, pack_weights=pack_weights)
        self.activation_fn = activation_fn if activation_fn is not None else default_activation(self.num_labels)
        self._set_prompts(prompts, default_prompt_name)
        self._query_pairs: QueryPairs | None = None  # built on first use, again once max_length changes
        if device is not None and isinstance(model_name_or_path, nn.Module):
            self.to(device)
        self.settle_auto()

    def _bar_outputs(self) -> np.ndarray:
        pairs, _ = bars.calibration_pairs()
        scores = self.activation(self.encode_tokenized(self._encode_texts(pairs)))
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def _bar(self, reference: np.ndarray, fast: np.ndarray, mode: str, margin: float = 1.0) -> bars.Measured:
        return bars.scores(reference, fast, mode, bars.calibration_pairs()[1], margin)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
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
            dtype: None (default: float32), "auto", a dtype or its name, as Embedder.from_pretrained;
                "int8": as quantize="int8".
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
        model, tokenizer, folder = cls._load(
            name_or_path, LoadOptions.check(quantize, dtype, device, allow_nonfinite, hub_kwargs)
        )
        return cls(
            model,
            tokenizer,
            max_length=max_length if max_length is not None else folder["max_length"],
            unpad=unpad,
            activation_fn=activation_fn if activation_fn is not None else folder["activation_fn"],
            prompts=folder["prompts"],
            default_prompt_name=folder["default_prompt_name"],
            pack_weights=pack_weights,
        )

    @classmethod
    def _load(
        cls, name_or_path: str | os.PathLike, options: LoadOptions
    ) -> tuple[BertForSequenceClassification, Tokenizer, dict[str, Any]]:
        """from_pretrained's loading: the model, its tokenizer and the folder's settings (max_length,
        activation_fn, prompts, default_prompt_name), None where the folder says nothing."""
        hub_kwargs = options.hub_kwargs
        settings = read_cross_encoder_settings(name_or_path, **hub_kwargs)
        config = CONFIG_CLASSES.get(read_model_type(name_or_path, hub_kwargs), BertConfig).from_pretrained(
            name_or_path, **hub_kwargs
        )
        architectures = config.extra.get("architectures") or []
        if architectures and not str(architectures[0]).endswith("ForSequenceClassification"):
            raise ValueError(
                f"{name_or_path} is a {architectures[0]} checkpoint without a classifier, not a cross-encoder "
                "(sequence-classification) model; for embeddings use bertlite.Embedder"
            )
        model, tokenizer = options.load(_load_classifier, name_or_path, config)
        folder = {
            "max_length": settings.max_length,
            "activation_fn": folder_activation(name_or_path, settings.activation_fn, config.extra),
            "untrusted_activation": untrusted_activation(settings.activation_fn, config.extra),
            "prompts": settings.prompts,
            "default_prompt_name": settings.default_prompt_name,
        }
        return model, tokenizer, folder

    @property
    def config(self) -> BertConfig:
        """The model's config (id2label gives the labels' names)."""
        return self.model.config

    @property
    def default_activation_function(self) -> Callable[[Tensor], Tensor]:
        """activation_fn under sentence-transformers' older name (a DeprecationWarning says so)."""
        warn_user(
            "The `default_activation_function` property was renamed and is now deprecated. Please use "
            "`activation_fn` instead.",
            DeprecationWarning,
        )
        return self.activation_fn

    @property
    def num_labels(self) -> int:
        """Scores per pair: 1 for a reranker, the classes for a classifier (3 for NLI, say)."""
        return self.model.config.num_labels

    def _transformer_config(self) -> dict[str, Any]:
        return {
            "transformer_task": "sequence-classification",
            "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
            "module_output_name": "scores",
        }

    def _st_config(self) -> dict[str, Any]:
        """The activation by its class path, as sentence-transformers saves it; a plain function (which no path
        restores) is left out with a warning, so a load gets the default activation."""
        fn = self.activation_fn
        path = None
        if isinstance(fn, nn.Module):
            path = f"{type(fn).__module__}.{type(fn).__qualname__}"
        else:
            warn_user(
                f"activation_fn {fn!r} is not a torch.nn.Module, which a saved folder cannot name; saved without it"
            )
        return {**super()._st_config(), "activation_fn": path}

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

    @staticmethod
    def is_singular_input(inputs: Any) -> bool:
        """Whether `inputs` is one pair (True) or a batch of pairs, as sentence-transformers' CrossEncoder decides: a
        list or tuple whose first item is no list or tuple is one pair; a numpy array of strings is one pair when
        1-D and not empty.

        Args:
            inputs: what predict was given.

        Returns:
            True for one pair.
        """
        if isinstance(inputs, list | tuple):
            return len(inputs) > 0 and not isinstance(inputs[0], list | tuple)
        if isinstance(inputs, np.ndarray) and inputs.dtype.kind in ("U", "O"):
            return inputs.size > 0 and inputs.ndim < 2
        return True

    def tokenize_pairs(self, query: str, documents: Sequence[str], first_index: int = 0) -> list[PairIds]:
        """The pairs (query, document) of each document, the query tokenized once: the same ids as
        encodings() gives each pair, read only as far as truncation at max_length needs.

        Args:
            query: the first text of every pair (prompt included, if any).
            documents: the second texts.
            first_index: index of documents[0] in the caller's input, for error messages.

        Returns:
            One encoding per document, in order, for encode_tokenized.

        Raises:
            ValueError: a query or document that is not a str, or holds a lone surrogate.
            TypeError: documents that are not a list of texts (None, a number, a single str).
        """
        check_text(query, first_index)
        check_texts("documents", documents, "a list of str", one_str=False)
        for i, document in enumerate(documents):
            if not isinstance(document, str):
                raise ValueError(f"texts[{first_index + i}] is {type(document).__name__}; each document must be a str")
            check_text(document, first_index + i)
        pairs = self._query_pairs
        if pairs is None or pairs.truncation != self.backend_tokenizer.truncation:
            pairs = self._query_pairs = QueryPairs(self.backend_tokenizer, self._cutter)
        return pairs.encode(query, documents)

    def encode_tokenized(
        self, encodings: Sequence[Encoding], batch_size: int | None = None, *, max_tokens: int | None = None
    ) -> np.ndarray:
        """The raw logits of pairs that encodings() has already turned into encodings.

        Args:
            encodings: encodings()' or tokenize_pairs()' output for (query, document) pairs (prompt included).
            batch_size, max_tokens: as in Embedder.encode: with neither, the packed path batches by a
                token budget and the padded path by 32 pairs.

        Returns:
            float32 logits (n, num_labels), no activation, in input order.
        """
        return self._logits(list(encodings), batch_size, max_tokens, show_progress_bar=False).numpy()

    @renamed_keywords(sentences="inputs", activation_fct="activation_fn")
    @arrays_as_lists
    @takes_processing_kwargs
    def predict(
        self,
        inputs: Sequence[Pair] | Pair,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        apply_softmax: bool | None = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | list[str | torch.device] | None = None,
        pool: dict[str, Any] | None = None,
        chunk_size: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> np.ndarray | Tensor | list[Tensor] | np.float32:
        """Score (query, document) pairs, as sentence_transformers.CrossEncoder.predict (its arguments in its order).

        Args:
            inputs: pairs of str (tuples or lists), or one pair, which gives one score.
            prompt_name, prompt: text put before each pair's first text, as sentence-transformers;
                None: the default prompt, if any.
            batch_size: caps pairs per batch; None: the token budget of encode_tokenized (the scores
                do not depend on it).
            show_progress_bar: a tqdm bar on stderr; None: shown when stderr is a terminal.
            activation_fn: for this call instead of the CrossEncoder's.
            apply_softmax: softmax over the labels of each pair (only with num_labels > 1).
            convert_to_numpy: a numpy array; False: a list of tensors.
            convert_to_tensor: one tensor (wins over convert_to_numpy).
            device: one device: the model is moved there first (to()), as sentence-transformers moves it;
                a list of devices: a pool of processes on them for this call; None: where it is.
            pool: a pool of start_multi_process_pool's to score in (its processes each score a chunk).
            chunk_size: pairs per chunk sent to a pool's process; None: about 10 chunks per process.
            max_tokens: caps batch size x longest pair.
            processing_kwargs: (keyword) {"text": {"max_length": n, "truncation": True}}: this call's max_length
                (bertlite.jobs.st.processing).

        Returns:
            float32 scores: (n,) for one label, (n, num_labels) for more; for one pair, its score (a
            numpy scalar, or a row).

        Raises:
            ValueError: a pair that is not two str, a pair with an empty text (naming its index), a bad
                batch_size, max_tokens or chunk_size, an unknown prompt_name.
            RuntimeError: a pool's process exited.
        """
        check_texts("inputs", inputs, PAIRS, one_str=False)
        check_count("batch_size", batch_size)
        single = isinstance(inputs, list | tuple) and len(inputs) > 0 and not isinstance(inputs[0], list | tuple)
        pairs = [inputs] if single else list(inputs)
        check_pairs(pairs)
        pairs = with_prompt(pairs, self.resolve_prompt(prompt, prompt_name))
        chunks = self._pooled(
            device, pool, chunk_size, "pair_logits", pairs, not single, batch_size=batch_size, max_tokens=max_tokens
        )
        if not pairs:
            scores = torch.empty(0)
        else:
            logits = torch.cat(chunks) if chunks is not None else None
            if logits is None:
                logits = self.pair_logits(pairs, batch_size, max_tokens, show_progress_bar)
            scores = self._scores(logits, activation_fn)
            if apply_softmax and scores.ndim > 1:
                scores = torch.softmax(scores, dim=1)
        if convert_to_tensor:
            result: Any = scores
        elif convert_to_numpy:
            # sentence-transformers gives np.array([]) (float64) for no pairs, whatever num_labels
            result = scores.numpy() if len(scores) else np.array([])
        else:
            result = list(scores)
        return result[0] if single else result

    @renamed_keywords(activation_fct="activation_fn")
    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        activation_fn: Callable[[Tensor], Tensor] | None = None,
        device: str | torch.device | list[str | torch.device] | None = None,
        pool: dict[str, Any] | None = None,
        chunk_size: int | None = None,
        *,
        max_tokens: int | None = None,
        **deprecated: Any,
    ) -> list[dict[str, Any]]:
        """Rank documents by their score with the query, as sentence_transformers.CrossEncoder.rank.
        The query is tokenized once (tokenize_pairs), not once per document.

        Args:
            query: the query.
            documents: the documents.
            top_k: keep the best top_k (more than there are keeps all); None: all.
            return_documents: add each document's text under "text".
            prompt_name, prompt, batch_size, show_progress_bar, activation_fn, device, pool, chunk_size,
                max_tokens: as in predict().
            **deprecated: what sentence-transformers' rank accepts and ignores (convert_to_numpy,
                convert_to_tensor, apply_softmax, num_workers); ignored here too.

        Returns:
            {"corpus_id": index into documents, "score": float[, "text": str]} per document, best first;
            equal scores keep the documents' order.

        Raises:
            ValueError: a model with more than one label, top_k below 1, an empty query or document
                (naming its index), or what predict() refuses.
            TypeError: a keyword neither rank() nor sentence-transformers' rank takes.
        """
        unknown = sorted(set(deprecated) - set(IGNORED_RANK_KWARGS))
        if unknown:
            raise TypeError(f"rank() got an unexpected keyword argument {unknown[0]!r}")
        for name in sorted(deprecated):
            logger.warning(f"The CrossEncoder.rank `{name}` argument is deprecated and has no effect")
        if self.num_labels != 1:
            raise ValueError(
                f"rank() needs a model with num_labels=1, this one has {self.num_labels}; use predict() on the pairs"
            )
        check_count("top_k", top_k, none="all documents")
        if not isinstance(query, str) or not query:
            raise ValueError(f"query must be a non-empty str, got {query!r:.40}")
        check_texts("documents", documents, "a list of str", one_str=False)
        check_count("batch_size", batch_size)
        documents = list(documents)
        for i, document in enumerate(documents):
            if not isinstance(document, str) or not document:
                raise ValueError(f"documents[{i}] must be a non-empty str, got {document!r:.40}")
        query = self.resolve_prompt(prompt, prompt_name) + query
        options = {"query": query, "batch_size": batch_size, "max_tokens": max_tokens}
        chunks = self._pooled(device, pool, chunk_size, "query_logits", documents, **options)
        if not documents:
            return []
        if chunks is not None:
            logits = torch.cat(chunks)
        else:
            logits = self.query_logits(documents, query, batch_size, max_tokens, show_progress_bar)
        scores = self._scores(logits, activation_fn).tolist()
        results = [{"corpus_id": i, "score": score} for i, score in enumerate(scores)]
        if return_documents:
            for result in results:
                result["text"] = documents[result["corpus_id"]]
        # sorted() is stable, so equal scores keep input order, as in sentence-transformers
        return sorted(results, key=lambda result: result["score"], reverse=True)[:top_k]

    def pair_logits(
        self,
        pairs: list[Pair],
        batch_size: int | None = None,
        max_tokens: int | None = None,
        show_progress_bar: bool | None = False,
    ) -> Tensor:
        """The model's (n, num_labels) float32 logits of pairs, on the CPU (predict's step; a pool's process runs it).

        Args:
            pairs: (text_a, text_b) pairs, their prompt in place.
            batch_size, max_tokens, show_progress_bar: as in predict().
        """
        return self._logits(self.encodings(pairs), batch_size, max_tokens, show_progress_bar)

    def query_logits(
        self,
        documents: list[str],
        query: str,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        show_progress_bar: bool | None = False,
    ) -> Tensor:
        """The model's (n, 1) float32 logits of (query, document) pairs, the query tokenized once (rank's step;
        a pool's process runs it).

        Args:
            documents: the documents.
            query: the query, its prompt in place.
            batch_size, max_tokens, show_progress_bar: as in predict().
        """
        return self._logits(self.tokenize_pairs(query, documents), batch_size, max_tokens, show_progress_bar)

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
        n = len(encodings)
        if not getattr(self.model, "reads_first_token_only", True):  # ModernBERT's mean pooling reads every row
            out, layout = self.forward_packed(encodings, device)
            pooled = self.model.pool_packed(out.last_hidden_state, layout)[:n]
            return on_whole_blocks(self.model.classify, pooled).float().cpu()  # a pair's bits in any batch
        out, _ = self.forward_packed(encodings, device, first_tokens_only=True)  # the heads read [CLS] only
        # The head runs on every row the forward gave, filler rows included: on the CPU a count on shape_tokens'
        # grid (a multiple of 8), on which its GEMM rounds a text's row alike in any batch (on_whole_blocks).
        return self._classify(out.last_hidden_state, out.pooler_output)[:n]

    @torch.inference_mode()
    def _run_padded(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        out, mask = self.forward_padded(encodings, device)
        if not getattr(self.model, "reads_first_token_only", True):
            layout = PackedLayout.from_mask(mask)
            pooled = self.model.pool_packed(layout.gather_from_grid(out.last_hidden_state), layout)
            return on_whole_blocks(self.model.classify, pooled).float().cpu()
        return self._classify(out.last_hidden_state[:, 0], out.pooler_output)

    def _classify(self, first_tokens: Tensor, pooled: Tensor | None) -> Tensor:
        """The model's head (its classify) on (B, H) first tokens or pooler outputs: (B, num_labels) float32, CPU."""
        return self.model.classify(first_tokens, pooled).float().cpu()


def _load_classifier(name_or_path: str | os.PathLike, **kwargs: Any) -> BertForSequenceClassification:
    """The config's family's ForSequenceClassification.from_pretrained (BERT's, RoBERTa's, ...), refusing a
    checkpoint without classifier weights (which it would initialise freshly)."""
    model_class = AutoModelForSequenceClassification.model_class(kwargs["config"].model_type)
    model, info = model_class.from_pretrained(name_or_path, output_loading_info=True, **kwargs)
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
