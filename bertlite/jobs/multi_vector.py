"""ColBERT late interaction: one vector per token, scored with MaxSim. `MultiVectorEncoder`.

The vectors are those sentence-transformers' MultiVectorEncoder gives for the same folder: the
query or document prompt ("[Q] ", "[D] ") before the text, queries [MASK]-expanded to a fixed
width, the base model's token rows through the Dense projection and Normalize, and the tokens
its MultiVectorMask scores kept (documents drop skiplist tokens such as punctuation).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor, nn

from bertlite.jobs import bars
from bertlite.jobs.base import (
    BaseEncoder,
    EncodeStats,
    check_count,
    check_text,
    on_whole_blocks,
    progress_bar,
)
from bertlite.jobs.inputs import check_texts, check_truncate_dim
from bertlite.jobs.long_texts import TextCutter
from bertlite.jobs.maxsim import maxsim, maxsim_pairwise
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.projection import Dense, Normalize, load_dense
from bertlite.jobs.st.base import TASK_PROMPTS, LoadingKeywords, STBase, check_wrapped
from bertlite.jobs.st.folders import read_multi_vector_settings
from bertlite.jobs.st.multi_vector import MultiVectorMembers
from bertlite.jobs.st.task_encode import TaskEncode
from bertlite.models.bert import BertModel

__all__ = ["MultiVectorEncoder", "Dense", "Normalize", "maxsim", "maxsim_pairwise"]

# The attribute encodings() sets on each Encoding: "query", "document" or None (encode's task).
TASK_ATTRIBUTE = "multi_vector_task"
# __init__'s arguments that _set_tasks takes.
TASK_SETTINGS = (
    "query_length",
    "document_length",
    "query_expansion",
    "skiplist_words",
    "skiplist_tasks",
    "keep_only_token_ids",
)


class MultiVectorEncoder(MultiVectorMembers, STBase, BaseEncoder):
    """A BertModel, its tokenizer and a projection: texts in, one vector per kept token out."""

    def __init__(
        self,
        model_name_or_path: str | os.PathLike | BertModel,
        tokenizer: Tokenizer | None = None,
        projection: nn.Module | None = None,
        *,
        max_length: int | None = None,
        query_length: int | None = None,
        document_length: int | None = None,
        query_expansion: dict[str, Any] | None = None,
        skiplist_words: Sequence[str] | None = None,
        skiplist_tasks: Sequence[str] | None = None,
        keep_only_token_ids: Sequence[int] | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        similarity_fn_name: str | None = None,
        truncate_dim: int | None = None,
        unpad: bool = True,
        pack_weights: bool = True,
        token_pooling: None = None,
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
        """Load a multi-vector (ColBERT) model by name or path, as sentence-transformers' MultiVectorEncoder(...)
        does, or wrap a loaded model, tokenizer and projection.

        MultiVectorEncoder(path, device=..., model_kwargs={"dtype": ...}) reads the folder as from_pretrained
        does (a bare name stays bare, as in sentence-transformers); the arguments below that are given win
        over the folder's, and prompts are added to the folder's.

        Args:
            model_name_or_path: a folder or hub id; or the BertModel to run, with its tokenizer and projection.
            tokenizer: its tokenizer (a copy is kept); None when loading by name.
            projection: maps the model's (N, H) float32 token rows to (N, dim) token vectors
                (e.g. nn.Sequential(Dense(H, 128, bias=False), Normalize())); None when loading by name.
            max_length: tokens per text when no task length applies; None: the model's maximum.
            query_length, document_length: tokens per query / document; None: max_length.
            query_expansion: {"strategy": "fixed" | "min", "attend": bool, "token": str, "length": int}:
                queries padded with `token` (e.g. "[MASK]") up to `length` tokens, which are scored;
                "fixed" also truncates them to `length`; attend: whether the encoder attends to
                them. None: no expansion.
            skiplist_words: tokens (e.g. punctuation) dropped from the output for skiplist_tasks; None: none.
            skiplist_tasks: the tasks ("query", "document") the skiplist applies to; a text encoded
                without a task counts as a document. None: documents.
            keep_only_token_ids: when set, documents keep only these token ids.
            prompts: text put before inputs, by name ("query", "document").
            default_prompt_name: the prompt encode() uses when given none.
            similarity_fn_name: "maxsim" (None) or "meanmaxsim" (MaxSim divided by the query's token count).
            truncate_dim: keep the first truncate_dim dimensions of every token vector (then
                re-normalized); None: all.
            unpad, pack_weights: as in BaseEncoder.
            token_pooling: None (sentence-transformers' token pooling is not implemented).
            device: where the model runs; None: CUDA, else MPS, else the CPU (st.base.default_device, as
                sentence-transformers). With a model: moved there (to()); None: where it is.
            cache_folder, trust_remote_code, revision, local_files_only, token, model_kwargs,
                processor_kwargs, config_kwargs, use_kernels, kernel_config, backend: sentence-transformers'
                loading options (bertlite.jobs.st.base.LoadingKeywords: model_kwargs' dtype is
                from_pretrained's dtype; trust_remote_code=True and the options bertlite lacks are refused).

        Raises:
            TypeError: a tokenizer or projection missing with a model, or given with a name; loading
                options given with a model.
            ValueError: a bad length, expansion, similarity_fn_name, default_prompt_name or truncate_dim,
                a token_pooling, what LoadingKeywords and from_pretrained refuse.
        """
        if token_pooling is not None:
            raise ValueError("token_pooling is not implemented in bertlite's MultiVectorEncoder; leave it None")
        loading = LoadingKeywords.of(locals())
        given = {
            "projection": projection,
            "max_length": max_length,
            "query_length": query_length,
            "document_length": document_length,
            "query_expansion": query_expansion,
            "skiplist_words": skiplist_words,
            "skiplist_tasks": skiplist_tasks,
            "keep_only_token_ids": keep_only_token_ids,
            "default_prompt_name": default_prompt_name,
            "similarity_fn_name": similarity_fn_name,
            "truncate_dim": truncate_dim,
        }
        if isinstance(model_name_or_path, nn.Module):
            model = model_name_or_path
            check_wrapped(tokenizer, loading)
            if projection is None:
                raise TypeError("a model needs its projection: pass (model, tokenizer, projection)")
        else:
            if projection is not None:
                raise TypeError(f"MultiVectorEncoder({model_name_or_path!r}, ...): the folder's projection is loaded")
            model, tokenizer, folder = self._load_by_name(model_name_or_path, tokenizer, loading)
            given = {key: value if value is not None else folder[key] for key, value in given.items()}
            prompts = {**folder["prompts"], **(prompts or {})}
        self._task_tokenizers: dict[str | None, tuple[Tokenizer, TextCutter]] = {}
        super().__init__(model, tokenizer, max_length=given["max_length"], unpad=unpad, pack_weights=pack_weights)
        self._set_projection(given["projection"])
        self._set_tasks(**{key: given[key] for key in TASK_SETTINGS})
        self._set_prompts(prompts, given["default_prompt_name"])
        self.similarity_fn_name = given["similarity_fn_name"]
        self.truncate_dim = self._check_truncate_dim(given["truncate_dim"])
        self._build_task_tokenizers()
        if device is not None and isinstance(model_name_or_path, nn.Module):
            self.to(device)
        self.settle_auto()

    def _bar_outputs(self) -> list[np.ndarray]:
        return self.encode_tokenized(self._encode_texts(bars.CALIBRATION_TEXTS))

    def _bar(
        self, reference: list[np.ndarray], fast: list[np.ndarray], mode: str, margin: float = 1.0
    ) -> bars.Measured:
        return bars.maxsim(reference, fast, mode, margin)

    def _set_projection(self, projection: nn.Module) -> None:
        """Keep the projection on the model's device, and the full token-vector dimension it gives."""
        self.projection = projection.to(self.device).eval()
        with torch.inference_mode():
            probe = torch.zeros(1, self.bert.config.hidden_size, device=self.device)
            self.dimension_full = int(projection(probe).shape[-1])

    def _set_tasks(
        self,
        query_length: int | None,
        document_length: int | None,
        query_expansion: dict[str, Any] | None,
        skiplist_words: Sequence[str] | None,
        skiplist_tasks: Sequence[str] | None,
        keep_only_token_ids: Sequence[int] | None,
    ) -> None:
        """The query and document settings (see __init__); None skiplists: none, for documents."""
        check_count("query_length", query_length, none="max_length")
        check_count("document_length", document_length, none="max_length")
        self.query_length, self.document_length = query_length, document_length
        self.query_expansion = dict(query_expansion) if query_expansion else None
        self.skiplist_tasks = list(("document",) if skiplist_tasks is None else skiplist_tasks)
        # A skiplist word that is not one token is dropped, as sentence-transformers drops it.
        ids = (self.backend_tokenizer.token_to_id(word) for word in skiplist_words or ())
        self.skiplist_ids = {i for i in ids if i is not None}
        self.keep_only_token_ids = set(keep_only_token_ids) if keep_only_token_ids is not None else None

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
        truncate_dim: int | None = None,
        allow_nonfinite: bool = False,
        pack_weights: bool = True,
        **hub_kwargs: Any,
    ) -> MultiVectorEncoder:
        """Load a sentence-transformers MultiVectorEncoder folder (or hub id): model, tokenizer, projection, settings.

        Args:
            name_or_path: a local folder or a hub id.
            device: where the model runs; None: the CPU.
            dtype: as Embedder.from_pretrained's (None: float32; "auto", a dtype or its name; "int8": int8).
            quantize: "int8": the base model's Linear layers in int8 (bertlite.quant.int8); None: none.
            max_length: tokens per text when no task length applies; None: the folder's.
            unpad, allow_nonfinite, pack_weights: as Embedder.from_pretrained's.
            truncate_dim: None: the folder's, if any.
            **hub_kwargs: hub options (revision, cache_dir, token, local_files_only, ...).

        Returns:
            The encoder.

        Raises:
            ValueError: a folder that is not a MultiVectorEncoder checkpoint (e.g. an embedding model:
                use bertlite.Embedder), or a setting bertlite does not implement; a bad device,
                dtype or quantize.
            CheckpointError: projection weights that do not fit their config.
        """
        model, tokenizer, folder = cls._load(
            name_or_path, LoadOptions.check(quantize, dtype, device, allow_nonfinite, hub_kwargs)
        )
        return cls(
            model,
            tokenizer,
            folder["projection"],
            max_length=max_length if max_length is not None else folder["max_length"],
            query_length=folder["query_length"],
            document_length=folder["document_length"],
            query_expansion=folder["query_expansion"],
            skiplist_words=folder["skiplist_words"],
            skiplist_tasks=folder["skiplist_tasks"],
            keep_only_token_ids=folder["keep_only_token_ids"],
            prompts=folder["prompts"],
            default_prompt_name=folder["default_prompt_name"],
            similarity_fn_name=folder["similarity_fn_name"],
            truncate_dim=truncate_dim if truncate_dim is not None else folder["truncate_dim"],
            unpad=unpad,
            pack_weights=pack_weights,
        )

    @classmethod
    def _load(
        cls, name_or_path: str | os.PathLike, options: LoadOptions
    ) -> tuple[BertModel, Tokenizer, dict[str, Any]]:
        """from_pretrained's loading: the model, its tokenizer and the folder's projection and settings."""
        hub_kwargs = options.hub_kwargs
        settings = read_multi_vector_settings(name_or_path, **hub_kwargs)
        model, tokenizer = options.load(BertModel.from_pretrained, name_or_path, add_pooling_layer=False)
        hidden = model.config.hidden_size
        steps = [
            Normalize() if step == "normalize" else load_dense(name_or_path, step, hidden, hub_kwargs)
            for step in settings.steps
        ]
        folder = {
            "projection": nn.Sequential(*steps),
            "max_length": settings.max_length,
            "query_length": settings.query_length,
            "document_length": settings.document_length,
            "query_expansion": settings.query_expansion,
            "skiplist_words": settings.skiplist_words,
            "skiplist_tasks": settings.skiplist_tasks,
            "keep_only_token_ids": settings.keep_only_token_ids,
            "prompts": settings.prompts,
            "default_prompt_name": settings.default_prompt_name,
            "similarity_fn_name": settings.similarity_fn_name,
            "truncate_dim": settings.truncate_dim,
        }
        return model, tokenizer, folder

    # --- settings -----------------------------------------------------------------------

    @BaseEncoder.max_length.setter
    def max_length(self, value: int | None) -> None:
        """None: the model's max_position_embeddings; a larger value is clamped to it."""
        BaseEncoder.max_length.fset(self, value)
        if self._task_tokenizers:
            self._build_task_tokenizers()

    @property
    def dimension(self) -> int:
        """Length of each token vector (truncate_dim when set)."""
        return self.truncate_dim or self.dimension_full

    def _moved(self, *args: Any, **kwargs: Any) -> None:
        device, _, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:  # the projection runs in float32 on the model's float32 output
            self.projection.to(device)

    def _check_truncate_dim(self, truncate_dim: int | None) -> int | None:
        check_truncate_dim(truncate_dim, self.dimension_full)
        return truncate_dim

    def _build_task_tokenizers(self) -> None:
        """A tokenizer per task: truncation at its length; queries padded with the expansion token."""
        limit = self.bert.config.max_position_embeddings
        lengths = {None: self.max_length, "document": self.document_length, "query": self.query_length}
        expansion = self.query_expansion
        tokenizers = {}
        for task, length in lengths.items():
            length = min(length or self.max_length, limit)
            tokenizer = Tokenizer.from_str(self.backend_tokenizer.to_str())
            if task == "query" and expansion:
                floor = expansion["length"]
                # "fixed": exactly `floor` tokens; "min": at least `floor`, at most the query length.
                length = min(floor if expansion["strategy"] == "fixed" else max(length, floor), limit)
                token_id = tokenizer.token_to_id(expansion["token"])
                if token_id is None:
                    raise ValueError(f"query_expansion token {expansion['token']!r} is not in the tokenizer's vocab")
                tokenizer.enable_padding(pad_id=token_id, pad_type_id=0, pad_token=expansion["token"], length=floor)
            tokenizer.enable_truncation(length, strategy="longest_first")
            tokenizers[task] = (tokenizer, TextCutter(tokenizer, length))
        self._task_tokenizers = tokenizers

    def _task_prompt_name(self, task: str | None) -> str | None:
        # encode_query uses the "query" prompt; encode_document the first of document / passage / corpus.
        return self._prompt_for(task, None, None) if task in TASK_PROMPTS else None

    # --- tokenizing ---------------------------------------------------------------------

    def encodings(
        self,
        texts: Sequence[str],
        is_query: bool = False,
        on_long: str = "truncate",
        first_index: int = 0,
        *,
        prompt: str | None = None,
    ) -> list[Encoding]:
        """Tokenize queries or documents as encode_query / encode_document do: prompt, truncation, expansion.

        Args:
            texts: strings.
            is_query: queries (query prompt, query_length, [MASK] expansion) or documents.
            on_long: "truncate" (default) or "error": a ValueError for a text longer than its length.
            first_index: index of texts[0] in the caller's input, for error messages.
            prompt: the text put before each; None: the query / document prompt.

        Returns:
            One tokenizers.Encoding per text, marked as a query or a document for encode_tokenized().

        Raises:
            ValueError: a text that is not a str, holds a lone surrogate, or is too long under on_long="error".
        """
        check_texts("texts", texts, "a list of str", one_str=False)
        task = "query" if is_query else "document"
        if prompt is None:
            prompt = self.resolve_prompt(None, self._task_prompt_name(task))
        return self._tokenize(texts, task, prompt, on_long, first_index)

    def _tokenize(
        self, texts: Sequence[str], task: str | None, prompt: str, on_long: str, first_index: int = 0
    ) -> list[Encoding]:
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(
                    f"texts[{first_index + i}] is {type(text).__name__}; a multi-vector model encodes "
                    "single texts (str)"
                )
        if task not in (None, "query", "document"):
            raise ValueError(f"task={task!r} must be 'query', 'document' or None")
        if on_long not in ("truncate", "error"):
            raise ValueError(f"on_long={on_long!r} must be 'truncate' or 'error'")
        for i, text in enumerate(texts):
            check_text(text, first_index + i)
        tokenizer, cutter = self._task_tokenizers[task]
        encodings = tokenizer.encode_batch([cutter.cut(prompt + text) for text in texts])
        for i, e in enumerate(encodings):
            if on_long == "error" and e.overflowing:
                raise ValueError(
                    f"text {first_index + i} (0-based) is longer than {cutter.max_length} tokens; truncate it "
                    "(on_long='truncate') or raise the length"
                )
            setattr(e, TASK_ATTRIBUTE, task)
        return encodings

    # --- encoding -----------------------------------------------------------------------

    def encode_tokenized(
        self, encodings: Sequence[Encoding], batch_size: int | None = None, *, max_tokens: int | None = None
    ) -> list[np.ndarray]:
        """Token vectors of texts encodings() has already tokenized (queries or documents as marked there).

        Args:
            encodings: encodings()'s output.
            batch_size, max_tokens: as in encode().

        Returns:
            One float32 array (tokens_kept, dimension) per encoding, in input order.
        """
        rows = self._encode_rows(list(encodings), batch_size, max_tokens, None)
        return [vectors.cpu().numpy() for vectors in self._finish(rows, False, self.truncate_dim)]

    def encode(
        self,
        inputs: Sequence[str] | str,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        output_value: str = "token_embeddings",
        convert_to_numpy: bool = False,
        device: torch.device | str | None = None,
        normalize_embeddings: bool = False,
        token_pooling: None = None,
        truncate_dim: int | None = None,
        pool: dict[str, Any] | None = None,
        chunk_size: int | None = None,
        task: str | None = None,
        *,
        max_tokens: int | None = None,
        on_long: str = "truncate",
    ) -> list[Tensor] | list[np.ndarray] | Tensor | np.ndarray:
        """Token vectors of texts, as sentence-transformers' MultiVectorEncoder.encode.

        Prefer encode_query / encode_document, which set the task and its prompt.

        Args:
            inputs: a string or a list of strings.
            prompt_name, prompt: the text put before each input (see resolve_prompt); prompt wins.
            batch_size: caps texts per batch; None: a token budget (DEFAULT_MAX_TOKENS) on the packed path.
            show_progress_bar: a tqdm bar on stderr; None: shown when stderr is a terminal.
            output_value: "token_embeddings" (the only value implemented).
            convert_to_numpy: numpy arrays instead of tensors.
            device: one device: the model is moved there first (to()), as sentence-transformers moves it;
                a list of devices: a pool of processes on them for this call; None: where it is.
            normalize_embeddings: L2-normalize each token vector again.
            token_pooling: None (token pooling is not implemented).
            truncate_dim: for this call, as in __init__; None: the encoder's.
            pool: a pool of start_multi_process_pool's to encode in (its processes each encode a chunk).
            chunk_size: texts per chunk sent to a pool's process; None: about 10 chunks per process.
            task: "query", "document" or None: which length, expansion and skiplist apply.
            max_tokens: caps batch size x longest text.
            on_long: "truncate" (default) or "error".

        Returns:
            One float32 (tokens_kept, dimension) tensor per input (arrays with convert_to_numpy); for a
            single string, its one tensor or array.

        Raises:
            ValueError: an argument above that is not implemented or out of range, or a text tokenize refuses.
        """
        if output_value != "token_embeddings":
            raise ValueError(f"output_value={output_value!r}: bertlite's MultiVectorEncoder returns 'token_embeddings'")
        if token_pooling is not None:
            raise ValueError("token_pooling is not implemented in bertlite's MultiVectorEncoder")
        check_texts("inputs", inputs)
        check_count("batch_size", batch_size)
        dimension = self._check_truncate_dim(truncate_dim) or self.truncate_dim
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        options = {"prompt_name": prompt_name, "prompt": prompt, "batch_size": batch_size, "task": task}
        options |= {"convert_to_numpy": convert_to_numpy, "normalize_embeddings": normalize_embeddings}
        options |= {"truncate_dim": truncate_dim, "max_tokens": max_tokens, "on_long": on_long}
        chunks = self._pooled(device, pool, chunk_size, "encode", texts, not single, show_progress_bar=False, **options)
        if chunks is not None:
            return [vectors for chunk in chunks for vectors in chunk]
        encodings = self._tokenize(texts, task, self.resolve_prompt(prompt, prompt_name), on_long)
        rows = self._encode_rows(encodings, batch_size, max_tokens, show_progress_bar)
        result: list[Any] = self._finish(rows, normalize_embeddings, dimension)
        if convert_to_numpy:
            result = [vectors.cpu().numpy() for vectors in result]
        return result[0] if single else result

    # sentence-transformers' encode_query and encode_document: encode() with the task's prompt and the task.
    encode_query = TaskEncode("query")
    encode_document = TaskEncode("document")

    def _encode_rows(
        self, encodings: list[Encoding], batch_size: int | None, max_tokens: int | None, show: bool | None
    ) -> list[Tensor]:
        """The projected, normalized rows each encoding keeps, float32, in input order."""
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        stats = self.last_stats = EncodeStats(texts=len(encodings))
        out: list[Tensor] = [torch.empty(0)] * len(encodings)
        progress = progress_bar(len(encodings), show)
        try:
            for rows, vectors in self._run_sorted(encodings, batch_size, max_tokens, stats):
                for row, v in zip(rows, vectors, strict=True):
                    out[row] = v
                progress.update(len(rows))
        finally:
            progress.close()
        return out

    def _finish(self, rows: list[Tensor], normalize: bool, dimension: int | None) -> list[Tensor]:
        # sentence-transformers' order: the extra normalization, then truncation with re-normalization.
        if normalize:
            rows = [nn.functional.normalize(v, p=2, dim=-1) for v in rows]
        if dimension is not None and dimension < self.dimension_full:
            rows = [nn.functional.normalize(v[:, :dimension], p=2, dim=-1) for v in rows]
        return rows

    # --- the forward --------------------------------------------------------------------

    def _attends_all(self, e: Encoding) -> bool:
        # Expansion tokens carry attention_mask 0; the encoder sees them only with attend=True.
        return bool(self.query_expansion and self.query_expansion["attend"]) or 0 not in e.attention_mask

    def _keep(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        """(N,) bool over the batch's token rows: those MultiVectorMask scores."""
        keep = []
        for e in encodings:
            task = getattr(e, TASK_ATTRIBUTE, None)
            skip = self.skiplist_ids if (task or "document") in self.skiplist_tasks else set()
            only = self.keep_only_token_ids if task != "query" else None
            keep += [i not in skip and (only is None or i in only) for i in e.ids]
        return torch.tensor(keep, dtype=torch.bool, device=device)

    def _split(self, hidden: Tensor, encodings: list[Encoding], device: torch.device) -> list[Tensor]:
        """Project the real rows (N, H), keep the scored ones, one (tokens_kept, dim) tensor per sequence."""
        keep = self._keep(encodings, device)
        vectors = on_whole_blocks(self.projection, hidden.float())[keep]  # a text's vectors whatever its batch
        counts = keep.split([len(e.ids) for e in encodings])
        return list(vectors.split([int(c.sum()) for c in counts]))

    @torch.inference_mode()
    def _run_packed(self, encodings: list[Encoding], device: torch.device) -> list[Tensor]:
        if not all(self._attends_all(e) for e in encodings):
            # A packed layout cannot hold tokens that attend to a sequence which does not attend to them.
            return self._run_padded(encodings, device)
        out, _ = self.forward_packed(encodings, device)
        total = sum(len(e.ids) for e in encodings)
        return self._split(out.last_hidden_state[:total], encodings, device)

    @torch.inference_mode()
    def _run_padded(self, encodings: list[Encoding], device: torch.device) -> list[Tensor]:
        batch = self.collate(encodings, device)
        for row, e in enumerate(encodings):
            if not self._attends_all(e):
                batch["attention_mask"][row, : len(e.ids)] = torch.tensor(e.attention_mask, device=device)
        hidden = self.bert(**batch, return_dict=True).last_hidden_state  # (B, T, H)
        real = torch.cat([hidden[row, : len(e.ids)] for row, e in enumerate(encodings)])
        return self._split(real, encodings, device)

    # --- scoring ------------------------------------------------------------------------
