"""Text to sparse vocabulary-sized vectors (SPLADE): `SparseEncoder.encode`, as sentence-transformers' SparseEncoder.

The masked-LM head scores every vocabulary entry at every token; SPLADE keeps log(1 + relu(score))
and pools it over the text's tokens (max or sum). The head runs on the real tokens only, a few
sequences at a time, so no (batch, seq, vocab) tensor is built.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor

from bertlite.config import CONFIG_CLASSES, BertConfig
from bertlite.errors import CheckpointError
from bertlite.jobs import bars
from bertlite.jobs.base import (
    CHUNK_TEXTS,
    BaseEncoder,
    EncodeStats,
    Text,
    on_whole_blocks,
    progress_bar,
    with_prompt,
)
from bertlite.jobs.inputs import check_count, check_texts
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.sparse_vectors import SparseRow, assemble, join_chunks, keep_top, sparse_parts
from bertlite.jobs.st.base import LoadingKeywords, STBase, check_wrapped
from bertlite.jobs.st.folders import (
    EMBEDDER_HINT,
    SPLADE_ACTIVATIONS,
    SPLADE_POOLING,
    check_max_active_dims,
    read_splade_settings,
)
from bertlite.jobs.st.keywords import arrays_as_lists, encode_task, renamed_keywords
from bertlite.jobs.st.logs import prompt_over_name
from bertlite.jobs.st.names import SPARSE_ENCODER_ORGANIZATION
from bertlite.jobs.st.processing import takes_processing_kwargs
from bertlite.jobs.st.router import RouterLayout, StaticSparseQuery, read_router, read_router_settings
from bertlite.jobs.st.sparse_encoder import SparseEncoderMembers
from bertlite.jobs.st.task_encode import TaskEncode
from bertlite.models.auto import AutoModelForMaskedLM, read_model_type
from bertlite.models.heads import BertForMaskedLM
from bertlite.utils.warn import warn_user

__all__ = ["SparseEncoder", "SparseRow"]

# Token rows the MLM head scores at once: its (rows, vocab) logits are the largest tensor of a batch
# (120 MB for BERT's vocabulary), and this many rows keep the vocabulary GEMM efficient.
HEAD_ROWS = 1024


class SparseEncoder(SparseEncoderMembers, STBase, BaseEncoder):
    """A BertForMaskedLM and its tokenizer: texts in, one sparse vocabulary-sized (SPLADE) vector per text out."""

    default_huggingface_organization = SPARSE_ENCODER_ORGANIZATION

    @renamed_keywords(tokenizer_kwargs="processor_kwargs")
    def __init__(
        self,
        model_name_or_path: str | os.PathLike | BertForMaskedLM,
        tokenizer: Tokenizer | None = None,
        *,
        pooling_strategy: str | None = None,
        activation_function: str | None = None,
        max_active_dims: int | None = None,
        max_length: int | None = None,
        unpad: bool = True,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        similarity_fn_name: str | None = None,
        pack_weights: bool = True,
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
        """Load a SPLADE model by name or path, as sentence_transformers.SparseEncoder(...) does, or wrap a
        loaded masked-LM model and its tokenizer.

        SparseEncoder("naver/splade-v3", device=..., model_kwargs={"dtype": ...}) reads the folder as
        from_pretrained does (a bare name is looked up under sparse-encoder/, as sentence-transformers does);
        the arguments below that are given win over the folder's, and prompts are added to the folder's.

        Args:
            model_name_or_path: a folder, hub id or bare name; or a bertlite ...ForMaskedLM of any family (its
                masked-LM head scores the vocabulary), with its tokenizer.
            tokenizer: the model's tokenizer (a copy is kept, see BaseEncoder); None when loading by name.
            pooling_strategy: "max" (SPLADE v2 and later) or "sum", over each text's tokens; None: the
                folder's, else "max".
            activation_function: "relu" (log(1 + relu(x))) or "log1p_relu" (one more log1p), as
                SpladePooling's; None: the folder's, else "relu".
            max_active_dims: keep the largest max_active_dims values of every vector; None: the folder's,
                else all.
            max_length: tokens per text, longer ones truncated; None: the folder's, else the model's
                max_position_embeddings.
            unpad: packed batches (real tokens only); False: padded batches, as transformers runs them.
            prompts: text put before every input, by name; None: none (the folder's).
            default_prompt_name: the prompt that applies unless encode() is given prompt or prompt_name.
            similarity_fn_name: "dot" (None: the folder's, else dot) or "cosine", for similarity().
            pack_weights: see BaseEncoder.
            device: where the model runs; None: CUDA, else MPS, else the CPU (st.base.default_device, as
                sentence-transformers). With a model: moved there (to()); None: where it is.
            cache_folder, trust_remote_code, revision, local_files_only, token, model_kwargs,
                processor_kwargs, config_kwargs, use_kernels, kernel_config, backend: sentence-transformers'
                loading options (bertlite.jobs.st.base.LoadingKeywords: model_kwargs' dtype is
                from_pretrained's dtype; trust_remote_code=True and the options bertlite lacks are refused).

        Raises:
            TypeError: a model without a masked-LM head; a tokenizer missing with a model, or given with a
                name; loading options given with a model.
            ValueError: an unknown pooling_strategy, activation_function or similarity_fn_name, a bad
                max_active_dims, a default_prompt_name not in prompts, what LoadingKeywords refuses.
            CheckpointError: not a SPLADE checkpoint (see from_pretrained).
        """
        loading = LoadingKeywords.of(locals())
        if isinstance(model_name_or_path, torch.nn.Module):
            model = model_name_or_path
            check_wrapped(tokenizer, loading)
        else:
            model, tokenizer, folder = self._load_by_name(model_name_or_path, tokenizer, loading)
            given = {
                "pooling_strategy": pooling_strategy,
                "activation_function": activation_function,
                "max_active_dims": max_active_dims,
                "max_length": max_length,
                "default_prompt_name": default_prompt_name,
                "similarity_fn_name": similarity_fn_name,
            }
            settings = {key: value if value is not None else folder[key] for key, value in given.items()}
            pooling_strategy, activation_function = settings["pooling_strategy"], settings["activation_function"]
            max_active_dims, max_length = settings["max_active_dims"], settings["max_length"]
            default_prompt_name, similarity_fn_name = settings["default_prompt_name"], settings["similarity_fn_name"]
            prompts = {**folder["prompts"], **(prompts or {})}
        self._static_query: StaticSparseQuery | None = None
        if not isinstance(model_name_or_path, torch.nn.Module):
            self._static_query = folder.get("static_query")
        if not callable(getattr(model, "_prediction_scores", None)):
            raise TypeError(f"SparseEncoder needs a ...ForMaskedLM (a masked-LM head), got {type(model).__name__}")
        super().__init__(model, tokenizer, max_length=max_length, unpad=unpad, pack_weights=pack_weights)
        pooling_strategy = "max" if pooling_strategy is None else pooling_strategy
        activation_function = "relu" if activation_function is None else activation_function
        if pooling_strategy not in SPLADE_POOLING:
            raise ValueError(f"pooling_strategy={pooling_strategy!r} must be one of {', '.join(SPLADE_POOLING)}")
        if activation_function not in SPLADE_ACTIVATIONS:
            raise ValueError(
                f"activation_function={activation_function!r} must be one of {', '.join(SPLADE_ACTIVATIONS)}"
            )
        self.pooling_strategy = pooling_strategy
        self.activation_function = activation_function
        self.max_active_dims = check_max_active_dims(max_active_dims)
        self.similarity_fn_name = similarity_fn_name
        self._set_prompts(prompts, default_prompt_name)
        if device is not None and isinstance(model_name_or_path, torch.nn.Module):
            self.to(device)
        self.settle_auto()

    def _bar_outputs(self) -> list[SparseRow]:
        return self.encode_tokenized(self._encode_texts(bars.CALIBRATION_TEXTS))

    def _bar(self, reference: list[SparseRow], fast: list[SparseRow], mode: str, margin: float = 1.0) -> bars.Measured:
        return bars.sparse(reference, fast, mode, margin)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        quantize: str | None = None,
        max_length: int | None = None,
        max_active_dims: int | None = None,
        unpad: bool = True,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        allow_nonfinite: bool = False,
        pack_weights: bool = True,
        **hub_kwargs: Any,
    ) -> SparseEncoder:
        """Load a SPLADE model saved by sentence-transformers (an MLM Transformer and SpladePooling), or a bare
        ...ForMaskedLM checkpoint (max pooling, as sentence-transformers builds it).

        Explicit arguments win over the folder's metadata, which wins over the defaults.

        Args:
            name_or_path: a local checkpoint folder or a hub id.
            device: where the model runs; None: the CPU.
            dtype: as Embedder.from_pretrained's (None: float32; "auto", a dtype or its name, "int8").
            quantize: "int8": the encoder's Linears in int8 (bertlite.quant.int8), the head in float32.
            max_length: tokens per text; None: the folder's max_seq_length (or its tokenizer's
                model_max_length), else the model's max_position_embeddings.
            max_active_dims: None: the folder's (config_sentence_transformers.json), else no limit.
            unpad, pack_weights: see __init__.
            prompts: added to the folder's prompts (these win on a shared name).
            default_prompt_name: None: the folder's, if any.
            allow_nonfinite: load weights holding NaN or Inf (with a warning).
            **hub_kwargs: hub options (revision, cache_dir, token, local_files_only, ...).

        Returns:
            The SparseEncoder.

        Raises:
            CheckpointError: not a SPLADE checkpoint (no MLM head weights, a dense embedding model, an
                inference-free or CSR sparse model), naming what it is.
            ValueError: a device this machine cannot use, an unknown dtype or quantize, bad metadata, or an
                argument __init__ refuses.
        """
        model, tokenizer, folder = cls._load(
            name_or_path, LoadOptions.check(quantize, dtype, device, allow_nonfinite, hub_kwargs)
        )
        encoder = cls(
            model,
            tokenizer,
            pooling_strategy=folder["pooling_strategy"],
            activation_function=folder["activation_function"],
            max_active_dims=max_active_dims if max_active_dims is not None else folder["max_active_dims"],
            max_length=max_length if max_length is not None else folder["max_length"],
            unpad=unpad,
            prompts={**folder["prompts"], **(prompts or {})},
            default_prompt_name=default_prompt_name
            if default_prompt_name is not None
            else folder["default_prompt_name"],
            similarity_fn_name=folder["similarity_fn_name"],
            pack_weights=pack_weights,
        )
        encoder._static_query = folder.get("static_query")
        return encoder

    @classmethod
    def _load(
        cls, name_or_path: str | os.PathLike, options: LoadOptions
    ) -> tuple[BertForMaskedLM, Tokenizer, dict[str, Any]]:
        """from_pretrained's loading: the model, its tokenizer and the folder's settings for __init__."""
        hub_kwargs = options.hub_kwargs
        if (router := read_router(name_or_path, hub_kwargs)) is not None:
            return cls._load_router(name_or_path, options, router)
        config = CONFIG_CLASSES.get(read_model_type(name_or_path, hub_kwargs), BertConfig).from_pretrained(
            name_or_path, **hub_kwargs
        )
        settings = read_splade_settings(name_or_path, list(getattr(config, "architectures", None) or []), **hub_kwargs)
        model, tokenizer = options.load(_load_masked_lm, name_or_path, config)
        folder = {
            "pooling_strategy": settings.pooling_strategy,
            "activation_function": settings.activation_function,
            "max_active_dims": settings.max_active_dims,
            "max_length": settings.max_length,
            "prompts": settings.prompts,
            "default_prompt_name": settings.default_prompt_name,
            "similarity_fn_name": settings.similarity_fn_name,
        }
        return model, tokenizer, folder

    @classmethod
    def _load_router(
        cls, name_or_path: str | os.PathLike, options: LoadOptions, router: RouterLayout
    ) -> tuple[BertForMaskedLM, Tokenizer, dict[str, Any]]:
        """_load for inference-free SPLADE (a Router folder): the document side's model, tokenizer and settings
        from its subfolders, the folder's prompts and similarity, and the query side under "static_query"."""
        if router.default_route == "query":
            raise CheckpointError(f"{name_or_path}: a Router whose default route is the query side is not implemented")
        hub_kwargs = options.hub_kwargs
        document = replace(options, hub_kwargs={**hub_kwargs, "subfolder": router.document})
        model, tokenizer, folder = cls._load(name_or_path, document)
        settings = read_router_settings(name_or_path, router, hub_kwargs)
        folder.update(settings, static_query=StaticSparseQuery.load(name_or_path, router.query, hub_kwargs))
        weights = folder["static_query"].weight.shape[0]
        if weights != model.config.vocab_size:
            raise CheckpointError(
                f"{name_or_path}: the query side has {weights} weights, the vocabulary {model.config.vocab_size}"
            )
        return model, tokenizer, folder

    @property
    def vocab_size(self) -> int:
        """The vectors' length: one dimension per vocabulary entry."""
        return self.model.config.vocab_size

    @property
    def dimension(self) -> int:
        """The vectors' length (vocab_size)."""
        return self.vocab_size

    # --- sentence-transformers' API -------------------------------------------------

    @renamed_keywords(sentences="inputs")
    @arrays_as_lists
    @takes_processing_kwargs
    def encode(
        self,
        inputs: str | Sequence[Text],
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        convert_to_tensor: bool = True,
        convert_to_sparse_tensor: bool = True,
        save_to_cpu: bool = False,
        device: str | torch.device | list[str | torch.device] | None = None,
        max_active_dims: int | None = None,
        pool: dict[str, Any] | None = None,
        chunk_size: int | None = None,
        *,
        max_tokens: int | None = None,
        on_long: str = "truncate",
        **kwargs: Any,
    ) -> Tensor | list[Tensor]:
        """Sparse vectors of texts, in input order, as sentence_transformers.SparseEncoder.encode gives them.

        Args:
            inputs: a text, or a list of texts.
            prompt_name, prompt: see resolve_prompt().
            batch_size: caps texts per batch (batches are of similar length, longest first).
            show_progress_bar: a tqdm bar on stderr; None: shown when stderr is a terminal.
            convert_to_tensor: one (n, vocab_size) tensor (default); False: a list of (vocab_size,) tensors.
            convert_to_sparse_tensor: sparse COO tensors (default); False: dense float32.
            save_to_cpu: the result on the CPU (it is on the model's device otherwise).
            device: one device: the model is moved there first (to()), as sentence-transformers moves it;
                a list of devices: a pool of processes on them for this call; None: where it is.
            max_active_dims: keep the largest max_active_dims values of each vector; None: the encoder's.
            pool: a pool of start_multi_process_pool's to encode in (its processes each encode a chunk).
            chunk_size: texts per chunk sent to a pool's process; None: about 10 chunks per process.
            max_tokens: also caps batch size x longest text; None: no cap.
            on_long: "truncate" (default) or "error", as in encodings().
            **kwargs: "task" (sentence-transformers' Router models'): "query" encodes with the query side of
                inference-free SPLADE (StaticSparseQuery), anything else with the model; "processing_kwargs" as
                SentenceTransformer.encode's; other keywords are refused.

        Returns:
            (n, vocab_size) float32, sparse COO (coalesced) or dense; a (vocab_size,) vector for a single
            text; a list of vectors with convert_to_tensor=False.

        Raises:
            ValueError: a text encodings() refuses (raised from a pool's process too), a bad batch_size,
                max_tokens, max_active_dims, prompt or chunk_size.
            RuntimeError: a pool's process exited.
        """
        check_texts("inputs", inputs)
        check_count("batch_size", batch_size)
        prompt_name = prompt_over_name(self.prompts, prompt, prompt_name)
        if encode_task(self, kwargs) == "query" and self._static_query is not None:
            options = (convert_to_tensor, convert_to_sparse_tensor, save_to_cpu, max_active_dims)
            return self._encode_static(inputs, prompt_name, prompt, *options)
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        options = {"convert_to_tensor": convert_to_tensor, "convert_to_sparse_tensor": convert_to_sparse_tensor}
        chunks = self._pooled(
            device, pool, chunk_size, "encode", texts, not single, prompt_name=prompt_name, prompt=prompt,
            batch_size=batch_size, show_progress_bar=False, save_to_cpu=True, max_active_dims=max_active_dims,
            max_tokens=max_tokens, on_long=on_long, **options,
        )  # fmt: skip
        if chunks is not None:
            return join_chunks(chunks, convert_to_tensor, torch.device("cpu") if save_to_cpu else self.device)
        top_k = self._top_k(max_active_dims)
        prefix = self.resolve_prompt(prompt, prompt_name)
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        rows: list[Tensor] = []  # per text: dense (vocab,), or the (2, nnz) indices and values of its entries
        progress = progress_bar(len(texts), show_progress_bar)
        self.last_stats = stats = EncodeStats(texts=len(texts))
        try:
            for start in range(0, len(texts), CHUNK_TEXTS):
                chunk = with_prompt(texts[start : start + CHUNK_TEXTS], prefix)
                encodings = self.encodings(chunk, on_long, first_index=start)
                results: list[Any] = [None] * len(encodings)
                for batch_rows, pooled in self._run_sorted(encodings, batch_size, max_tokens, stats):
                    pooled = keep_top(pooled, top_k)
                    parts = pooled if not convert_to_sparse_tensor else sparse_parts(pooled)
                    for row, part in zip(batch_rows, parts, strict=True):
                        results[row] = part
                    progress.update(len(batch_rows))
                rows.extend(results)
        finally:
            progress.close()
        device = torch.device("cpu") if save_to_cpu else self.device
        return assemble(rows, self.vocab_size, device, convert_to_tensor, convert_to_sparse_tensor, single)

    # sentence-transformers' encode_query and encode_document: encode() with the task's prompt and the task.
    encode_query = TaskEncode("query")
    encode_document = TaskEncode("document")

    def _encode_static(
        self,
        inputs: str | Sequence[str],
        prompt_name: str | None,
        prompt: str | None,
        convert_to_tensor: bool,
        convert_to_sparse_tensor: bool,
        save_to_cpu: bool,
        max_active_dims: int | None,
    ) -> Tensor | list[Tensor]:
        """encode_query's vectors from the query side of inference-free SPLADE, in encode()'s forms."""
        single = isinstance(inputs, str)
        texts = with_prompt([inputs] if single else list(inputs), self.resolve_prompt(prompt, prompt_name))
        pooled = keep_top(self._static_query.encode(list(texts), torch.device("cpu")), self._top_k(max_active_dims))
        rows = sparse_parts(pooled) if convert_to_sparse_tensor else list(pooled)
        device = torch.device("cpu") if save_to_cpu else self.device
        return assemble(rows, self.vocab_size, device, convert_to_tensor, convert_to_sparse_tensor, single)

    def encode_tokenized(
        self,
        encodings: Sequence[Encoding],
        batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
        max_active_dims: int | None = None,
    ) -> list[SparseRow]:
        """The sparse vectors of texts encodings() has already turned into encodings (prompt included).

        Args:
            encodings: encodings()'s output.
            batch_size, max_tokens: the batch limits; neither given: the packed path batches by a token
                budget (DEFAULT_MAX_TOKENS), the padded path by 32 texts.
            max_active_dims: as in encode().

        Returns:
            Per encoding, in input order: (indices, values), int64 vocabulary ids ascending and their
            float32 weights, zeros left out.
        """
        top_k = self._top_k(max_active_dims)
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        stats = self.last_stats = EncodeStats(texts=len(encodings))
        out: list[Any] = [None] * len(encodings)
        for rows, pooled in self._run_sorted(list(encodings), batch_size, max_tokens, stats):
            for row, (indices, values) in zip(rows, sparse_parts(keep_top(pooled, top_k)), strict=True):
                out[row] = (indices.cpu().numpy(), values.cpu().numpy())
        return out

    # --- the computation --------------------------------------------------------------

    def _top_k(self, max_active_dims: int | None) -> int | None:
        return check_max_active_dims(max_active_dims) if max_active_dims is not None else self.max_active_dims

    @torch.inference_mode()
    def _run_packed(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        out, _ = self.forward_packed(encodings, device)
        lengths = [len(e.ids) for e in encodings]
        return self._splade(out.last_hidden_state[: sum(lengths)], lengths)  # filler rows sliced off

    @torch.inference_mode()
    def _run_padded(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        out, mask = self.forward_padded(encodings, device)
        return self._splade(out.last_hidden_state[mask.bool()], [len(e.ids) for e in encodings])

    def _splade(self, hidden: Tensor, lengths: list[int]) -> Tensor:
        """SPLADE vectors of packed token rows: the MLM head's logits, log(1 + relu(.)), pooled per sequence.

        Args:
            hidden: (sum(lengths), H) the real tokens' last hidden states, sequence after sequence.
            lengths: the tokens of each sequence.

        Returns:
            (len(lengths), vocab_size) float32 dense vectors.
        """
        pooled = torch.empty(len(lengths), self.vocab_size, dtype=torch.float32, device=hidden.device)
        for first, last, start, stop in _head_groups(lengths, HEAD_ROWS):
            # (rows, vocab): the family's MLM head, on whole row blocks so a text's logits do not depend on its batch
            logits = on_whole_blocks(self.model._prediction_scores, hidden[start:stop])
            owner = torch.repeat_interleave(
                torch.arange(last - first, device=hidden.device),
                torch.tensor(lengths[first:last], device=hidden.device),
            )
            if self.pooling_strategy == "max":
                # log1p and relu rise monotonically, so the max of the activations is the activation of the
                # max logit: one pass over the logits instead of three.
                top = logits.new_empty(last - first, logits.shape[1])
                top.scatter_reduce_(0, owner[:, None].expand_as(logits), logits, "amax", include_self=False)
                pooled[first:last] = self._activation(top.float())
            else:
                pooled[first:last] = 0.0
                pooled[first:last].index_add_(0, owner, self._activation(logits).float())
        return pooled

    def _activation(self, logits: Tensor) -> Tensor:
        """log(1 + relu(x)), or log(1 + log(1 + relu(x))) for "log1p_relu", in place."""
        logits = logits.relu_().log1p_()
        return logits.log1p_() if self.activation_function == "log1p_relu" else logits


def _load_masked_lm(name_or_path: str | os.PathLike, **kwargs: Any) -> BertForMaskedLM:
    """The config's family's ForMaskedLM.from_pretrained (BERT's, RoBERTa's, ...), refusing a checkpoint
    without MLM head weights (which it would initialise freshly, with a warning) before any warning is shown."""
    model_class = AutoModelForMaskedLM.model_class(kwargs["config"].model_type)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, info = model_class.from_pretrained(name_or_path, output_loading_info=True, **kwargs)
    base = f"{model.base_model_prefix}."
    missing = sorted(k for k in info["missing_keys"] if not k.startswith(base))
    if missing:
        raise CheckpointError(
            f"{name_or_path} is not a SPLADE checkpoint: its weights have no MLM head ({', '.join(missing)} "
            f"missing); {EMBEDDER_HINT}"
        )
    for warning in caught:
        warn_user(str(warning.message), warning.category)
    return model


def _head_groups(lengths: list[int], rows: int) -> Iterator[tuple[int, int, int, int]]:
    """Consecutive sequences of about `rows` tokens in all (one sequence at least): (first, last, start, stop),
    sequences first..last-1 and their token rows start..stop-1."""
    first = start = 0
    while first < len(lengths):
        last, stop = first + 1, start + lengths[first]
        while last < len(lengths) and stop + lengths[last] <= rows:
            stop += lengths[last]
            last += 1
        yield first, last, start, stop
        first, start = last, stop
