"""Text to vectors: tokenizer, length-sorted batching, pooling. `Embedder.encode`.

A sentence-transformers folder's settings (pooling, normalization, max length, prompts)
come from bertlite.jobs.st.folders, so the vectors are those SentenceTransformer(...).encode
gives, without importing it or transformers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor

from bertlite.jobs import bars
from bertlite.jobs.base import (
    CHUNK_TEXTS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_TOKENS,
    MAX_BATCH_SIZE,
    BaseEncoder,
    EncodeStats,
    Text,
    progress_bar,
    shape_tokens,
    with_prompt,
)
from bertlite.jobs.inputs import TEXTS, check_texts, check_truncate_dim
from bertlite.jobs.pooling import FIRST_TOKEN_POOLING, POOLER_NEEDED, pool, pool_packed
from bertlite.jobs.prepare import LoadOptions, check_device
from bertlite.jobs.st.base import NORMALIZE_MODULE, STBase
from bertlite.jobs.st.folders import (
    DEFAULT_NORMALIZE,
    DEFAULT_POOLING,
    POOLING_MODES,
    check_pooling,
    read_model_json,
    read_sentence_transformers_prompts,
    read_sentence_transformers_settings,
)
from bertlite.jobs.tasks import job_task_index, with_task
from bertlite.models.bert import BertModel
from bertlite.util import SIMILARITY_FUNCTIONS

if TYPE_CHECKING:
    from typing import Self  # Python 3.11; annotations only (they are strings here)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_TOKENS",
    "MAX_BATCH_SIZE",
    "CHUNK_TEXTS",
    "EncodeStats",
    "Embedder",
    "POOLING_MODES",
    "pool",
    "pool_packed",
    "shape_tokens",
    "check_device",
]

# The Pooling module a saved folder names (its class path in sentence-transformers 6).
POOLING_MODULE = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
# sentence-transformers' pooling_mode names where bertlite's differ.
ST_POOLING_NAMES = {"mean_sqrt_len": "mean_sqrt_len_tokens"}


# --- the embedder -----------------------------------------------------------------


class Embedder(STBase, BaseEncoder):
    """A BertModel, its tokenizer and a pooling: texts in, one vector per text out.

    sentence-transformers' members (STBase's: save, the pool; similarity, encode_query, ... below) under its
    names, but `tokenizer` and `tokenize` keep the Embedder's own meaning: the `tokenizers` backend and its
    Encodings (encodings()). SentenceTransformer gives them sentence-transformers' meaning.
    """

    # The Embedder's documented contract, not STBase's: the `tokenizers` backend, and tokenize() returning
    # unpadded Encodings (encodings()); SentenceTransformer puts STBase's back.
    tokenizer = BaseEncoder.tokenizer
    tokenize = BaseEncoder.tokenize

    def __init__(
        self,
        model: BertModel,
        tokenizer: Tokenizer,
        *,
        pooling: str | Sequence[str] = DEFAULT_POOLING,
        normalize: bool = DEFAULT_NORMALIZE,
        max_length: int | None = None,
        unpad: bool = True,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        truncate_dim: int | None = None,
        pack_weights: bool = True,
        similarity_fn_name: str | None = None,
    ) -> None:
        """Wrap a loaded model and tokenizer; Embedder.from_pretrained builds both from a folder.

        The model is put in eval mode and optimized for inference in place
        (bertlite.layers.onednn.optimize: oneDNN Linears, attention "auto") unless its
        attn_implementation is "eager", the reference.

        Args:
            model: the BertModel to run.
            tokenizer: its tokenizer; the Embedder keeps a copy of its own (truncation set, padding off),
                so the caller's keeps its settings.
            pooling: a mode of POOLING_MODES, or several, whose vectors are concatenated in order
                (default "mean"). "pooler" needs a model with a pooler.
            normalize: L2-normalize every vector (default False).
            max_length: tokens per text, longer ones truncated; None: the model's
                max_position_embeddings, and a larger value is clamped to it.
            unpad: give the model packed batches, real tokens only (bertlite.layers.packing); False:
                padded batches, as transformers runs them. Either way the model's attn_implementation
                applies (`model.set_attn_implementation`, eager included), and a model the layers
                cannot run packed (relative positions, a decoder) is padded inside BertModel.
            prompts: text put before every input, by name (sentence-transformers' meaning); None: none.
            default_prompt_name: the prompt that applies unless encode() is given prompt or
                prompt_name; None: no prompt by default.
            truncate_dim: keep the first truncate_dim dimensions of every vector, after normalization,
                as sentence-transformers' truncate_dim (for Matryoshka models); None: all of them.
            pack_weights: optimize's pack_weights: float32 Linear weights kept in oneDNN's layout,
                faster, for one more copy of the dense weights (32 MB for MiniLM-L6).
            similarity_fn_name: what similarity() computes: "cosine", "dot", "euclidean" or "manhattan";
                None: "cosine" (set on first use, as sentence-transformers does).

        Raises:
            ValueError: an unknown pooling mode, "pooler" without a pooler, a default_prompt_name not
                in prompts, truncate_dim outside 1..dimension, or an unknown similarity_fn_name.
        """
        super().__init__(model, tokenizer, max_length=max_length, unpad=unpad, pack_weights=pack_weights)
        self.similarity_fn_name = similarity_fn_name
        self.pooling = [pooling] if isinstance(pooling, str) else list(pooling)
        for mode in self.pooling:
            check_pooling(mode)
        if "pooler" in self.pooling and model.pooler is None:
            raise ValueError(POOLER_NEEDED)
        self.normalize = normalize
        self._set_prompts(prompts, default_prompt_name)
        # A folder whose pooling leaves the prompt out (include_prompt: false) sets this; see resolve_prompt.
        self.include_prompt = True
        self.truncate_dim = None
        self.truncate_dim = self._check_truncate_dim(truncate_dim)
        # The task adapter encode() uses when given no task (a model with adapters, jina-embeddings-v3's); None:
        # the plain weights, as the original's code without a task.
        self.default_task: str | None = None
        self.settle_auto()

    def _bar_outputs(self) -> np.ndarray:
        return self.encode_tokenized(self._encode_texts(bars.CALIBRATION_TEXTS))

    def _bar(self, reference: np.ndarray, fast: np.ndarray, mode: str, margin: float = 1.0) -> bars.Measured:
        return bars.embeddings(reference, fast, mode, margin)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        unpad: bool = True,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        truncate_dim: int | None = None,
        quantize: str | None = None,
        allow_nonfinite: bool = False,
        pack_weights: bool = True,
        similarity_fn_name: str | None = None,
        **hub_kwargs: Any,
    ) -> Self:
        """Load model, tokenizer and sentence-transformers settings from one folder or hub id.

        Explicit arguments win over the folder's metadata, which wins over the defaults.

        Args:
            name_or_path: a local checkpoint folder or a hub id.
            device: where the model runs (e.g. "cpu", "cuda:1"); None: the CPU.
            dtype: None (default): float32, the numbers transformers and sentence-transformers compute;
                "auto": asked for, the fastest dtype that keeps the job's answer (bfloat16 where this kind of
                CPU runs it faster and the job meets its bar, bfloat16 or float16 on CUDA, else float32); a
                dtype or its name; see bertlite.utils.capabilities.resolve_dtype. "int8": as quantize="int8".
            pooling: mode(s) as in __init__; None: the folder's, else "mean".
            normalize: as in __init__; None: the folder's, else False.
            max_length: as in __init__; None: the folder's, else the model's max_position_embeddings.
            unpad: see __init__.
            prompts: added to the folder's prompts (these win on a shared name), themselves added to the
                model's task instructions (config.json's task_instructions, by task name), if any.
            default_prompt_name: None: the folder's default prompt, if any.
            truncate_dim: see __init__.
            quantize: "int8": load float32, then bertlite.quant.int8.quantize_int8; None: no quantization.
            allow_nonfinite: load weights holding NaN or Inf (with a warning), as
                BertModel.from_pretrained's.
            pack_weights: see __init__.
            similarity_fn_name: as in __init__; None: the folder's (config_sentence_transformers.json), else
                "cosine".
            **hub_kwargs: hub options (revision, cache_dir, token, local_files_only, ...; see
                bertlite.hub.resolve_file), used for every file of the checkpoint.

        Returns:
            The Embedder.

        Raises:
            ValueError: a device this machine cannot use, an unknown dtype or quantize, or an argument
                __init__ refuses.
        """
        embedder = cls.__new__(cls)
        embedder._load(
            name_or_path,
            device=device,
            dtype=dtype,
            pooling=pooling,
            normalize=normalize,
            max_length=max_length,
            unpad=unpad,
            prompts=prompts,
            default_prompt_name=default_prompt_name,
            truncate_dim=truncate_dim,
            quantize=quantize,
            allow_nonfinite=allow_nonfinite,
            pack_weights=pack_weights,
            similarity_fn_name=similarity_fn_name,
            hub_kwargs=hub_kwargs,
        )
        return embedder

    def _load(
        self,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None,
        dtype: torch.dtype | str | None,
        pooling: str | Sequence[str] | None,
        normalize: bool | None,
        max_length: int | None,
        unpad: bool,
        prompts: dict[str, str] | None,
        default_prompt_name: str | None,
        truncate_dim: int | None,
        quantize: str | None,
        allow_nonfinite: bool,
        pack_weights: bool,
        similarity_fn_name: str | None,
        hub_kwargs: dict[str, Any],
    ) -> None:
        """from_pretrained's work, on this (not yet initialized) object: read the folder, load, __init__."""
        options = LoadOptions.check(quantize, dtype, device, allow_nonfinite, hub_kwargs)
        settings = read_sentence_transformers_settings(name_or_path, **hub_kwargs)
        saved_prompts, saved_default = read_sentence_transformers_prompts(name_or_path, **hub_kwargs)
        if normalize is None:
            normalize = settings.normalize if settings.normalize is not None else DEFAULT_NORMALIZE
        pooling = pooling or settings.pooling or DEFAULT_POOLING
        modes = [pooling] if isinstance(pooling, str) else list(pooling)
        # The pooler is loaded only when a pooling mode uses it: many sentence-embedding
        # checkpoints ship without one, and then it would be a missing key.
        if similarity_fn_name is None:
            similarity_fn_name = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs).get(
                "similarity_fn_name"
            )
        model, tokenizer = options.load(BertModel.from_pretrained, name_or_path, add_pooling_layer="pooler" in modes)
        Embedder.__init__(
            self,
            model,
            tokenizer,
            pooling=modes,
            normalize=normalize,
            max_length=max_length if max_length is not None else settings.max_length,
            unpad=unpad,
            # A model's own task instructions (jina-embeddings-v3's config.json) are prompts under the task's
            # name, unless the folder's prompts name them.
            prompts={**getattr(model.config, "task_instructions", {}), **saved_prompts, **(prompts or {})},
            default_prompt_name=default_prompt_name if default_prompt_name is not None else saved_default,
            truncate_dim=truncate_dim,
            pack_weights=pack_weights,
            similarity_fn_name=similarity_fn_name,
        )
        self.include_prompt = settings.include_prompt

    @property
    def dimension(self) -> int:
        """Length of the vectors encode() returns (truncate_dim when set, and shorter than the model's vectors)."""
        full = self.model.config.hidden_size * len(self.pooling)
        # a truncate_dim set above the model's length keeps every dimension, as in sentence-transformers
        return min(self.truncate_dim, full) if self.truncate_dim else full

    def _check_truncate_dim(self, truncate_dim: int | None) -> int | None:
        check_truncate_dim(truncate_dim, self.dimension)
        return truncate_dim

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """BaseEncoder.resolve_prompt's text (prompt, else prompts[prompt_name], else the default prompt, else ""),
        given one of prompt and prompt_name at most.

        Raises:
            ValueError: both arguments given, an unknown prompt_name, or a non-empty prompt for a
                model whose pooling leaves the prompt out (include_prompt: false).
        """
        if prompt is not None and prompt_name is not None:
            raise ValueError("give prompt or prompt_name, not both")
        prompt = super().resolve_prompt(prompt, prompt_name)
        if prompt and not self.include_prompt:
            raise ValueError(
                f"prompt {prompt!r}: this model's pooling leaves the prompt's tokens out (include_prompt: false), "
                "which bertlite does not implement; its vectors would differ from sentence-transformers'"
            )
        return prompt

    def encode(
        self,
        texts: Sequence[Text],
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        convert_to: str = "numpy",
        *,
        max_tokens: int | None = None,
        on_long: str = "truncate",
        prompt_name: str | None = None,
        prompt: str | None = None,
        truncate_dim: int | None = None,
        output_value: str = "sentence_embedding",
        task: str | None = None,
    ) -> np.ndarray | Tensor | list[np.ndarray] | list[Tensor]:
        """Embed texts: one vector per text, in input order.

        Batches are built from length-sorted texts so little is padding. With neither batch_size
        nor max_tokens given, the unpadded path batches by a token budget (DEFAULT_MAX_TOKENS) and
        the padded path by 32 texts.

        Args:
            texts: strings, or (text_a, text_b) pairs.
            batch_size: caps texts per batch; None: see above.
            show_progress_bar: a tqdm bar on stderr; None: shown when stderr is a terminal.
            convert_to: "numpy" (default) or "torch".
            max_tokens: caps batch size x longest text; None: see above.
            on_long: "truncate" (default) or "error", as in encodings().
            prompt_name: see resolve_prompt().
            prompt: see resolve_prompt(); the prompt goes before each text (before the first text
                of a pair).
            truncate_dim: for this call, as in __init__; None: the Embedder's.
            output_value: "sentence_embedding" (default) or "token_embeddings": for each text the base
                model's last hidden state at its real tokens ([CLS] and [SEP] included), neither
                normalized nor truncated, as sentence-transformers' output_value="token_embeddings".
            task: the task adapter to run (a name of the model's config.lora_adaptations, jina-embeddings-v3's);
                None: default_task. It adds no instruction: prompt_name=task does (the folder's prompts).

        Returns:
            float32 vectors (n, dimension): a numpy array, or a tensor with convert_to="torch".
            "token_embeddings": a list of float32 (tokens, hidden_size) arrays (tensors with convert_to="torch").

        Raises:
            ValueError: a text encodings() refuses, a bad batch_size, max_tokens, on_long,
                truncate_dim, prompt (see resolve_prompt()) or task (an unknown one, naming the model's).
            TypeError: `texts` is a single string, or not a list of texts.
        """
        check_texts("texts", texts, TEXTS, one_str=False)
        if convert_to not in ("numpy", "torch"):
            raise ValueError(f"convert_to={convert_to!r} must be 'numpy' or 'torch'")
        if output_value == "token_embeddings":
            if isinstance(texts, str):
                raise TypeError("encode() takes a list of texts; wrap a single string in a list")
            encodings = self._encode_texts(with_prompt(texts, self.resolve_prompt(prompt, prompt_name)), on_long)
            rows = self.encode_tokenized(
                encodings, batch_size, max_tokens=max_tokens, output_value=output_value, task=task
            )
            return [torch.from_numpy(r) for r in rows] if convert_to == "torch" else rows
        _check_output_value(output_value)
        out = torch.empty(len(texts), self._check_truncate_dim(truncate_dim) or self.dimension, dtype=torch.float32)
        for start, vectors in self.encode_chunks(
            texts,
            batch_size,
            show_progress_bar,
            max_tokens=max_tokens,
            on_long=on_long,
            prompt_name=prompt_name,
            prompt=prompt,
            truncate_dim=truncate_dim,
            task=task,
        ):
            out[start : start + len(vectors)] = vectors
        return out if convert_to == "torch" else out.numpy()

    def encode_chunks(
        self,
        texts: Iterable[Text],
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        *,
        max_tokens: int | None = None,
        on_long: str = "truncate",
        total: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        truncate_dim: int | None = None,
        first_row: int = 0,
        task: str | None = None,
    ) -> Iterator[tuple[int, Tensor]]:
        """Embed texts chunk by chunk in input order, so a caller can write a large input out as it goes.

        Args:
            texts: any iterable of strings or (text_a, text_b) pairs, an endless one too: it is read
                chunk_texts at a time, so memory does not grow with its length.
            batch_size, show_progress_bar, max_tokens, on_long, prompt_name, prompt, truncate_dim, task:
                as in encode().
            total: the row count for the progress bar, when `texts` has no len(); None: its len(),
                if any.
            first_row: the row number of texts[0] in the whole input (a job that resumes after
                first_row rows): rows are numbered from it, and `total` counts the rows before it.

        Yields:
            (start, vectors): float32 vectors (n, dimension) of rows start..start + n - 1.

        Raises:
            ValueError, TypeError: as encode().
        """
        check_texts("texts", texts, TEXTS, one_str=False)
        prefix = self.resolve_prompt(prompt, prompt_name)
        task_id = self.task_index(task)
        dimension = self._check_truncate_dim(truncate_dim) or self.dimension
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        if on_long not in ("truncate", "error"):
            raise ValueError(f"on_long={on_long!r} must be 'truncate' or 'error'")
        if total is None and isinstance(texts, Sized):
            total = first_row + len(texts)
        stats = self.last_stats = EncodeStats()
        progress = progress_bar(total, show_progress_bar, initial=first_row)
        try:
            for start, count, encodings in self.tokenized_chunks(iter(texts), prefix, on_long, first_row):
                stats.texts += count
                vectors = torch.empty(count, self.dimension, dtype=torch.float32)
                for batch_rows, batch_vectors in self.run_to_host(
                    with_task(encodings, task_id), batch_size, max_tokens, stats, on_batch=progress.update
                ):
                    vectors[batch_rows] = batch_vectors
                yield start, vectors[:, :dimension].contiguous()
        finally:
            progress.close()

    def encode_tokenized(
        self,
        encodings: Sequence[Encoding],
        batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
        output_value: str = "sentence_embedding",
        task: str | None = None,
    ) -> np.ndarray | list[np.ndarray]:
        """encode() for texts that encodings() has already turned into encodings (prompt included).

        For a caller that needs the token counts before the forward (bertlite serve's handlers), so
        each text is tokenized once.

        Args:
            encodings: encodings()'s output.
            batch_size, max_tokens, output_value, task: as in encode().

        Returns:
            float32 vectors (n, dimension) as a numpy array, in input order, batched as encode() batches;
            "token_embeddings": a list of float32 (tokens, hidden_size) arrays.
        """
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        encodings = with_task(list(encodings), self.task_index(task))
        stats = self.last_stats = EncodeStats(texts=len(encodings))
        if _check_output_value(output_value) == "token_embeddings":
            tokens: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(encodings)
            run = self._tokens_packed if self.unpad else self._tokens_padded
            for rows, batch_tokens in self._run_sorted(list(encodings), batch_size, max_tokens, stats, run=run):
                for row, rows_of_text in zip(rows, batch_tokens, strict=True):
                    tokens[row] = rows_of_text.cpu().numpy()
            return tokens
        vectors = torch.empty(len(encodings), self.dimension, dtype=torch.float32)
        for rows, batch_vectors in self.run_to_host(list(encodings), batch_size, max_tokens, stats):
            vectors[rows] = batch_vectors
        return vectors.numpy()

    @torch.inference_mode()
    def _run_packed(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        if set(self.pooling) <= FIRST_TOKEN_POOLING:
            # These modes read only [CLS], so the last layer computes nothing else.
            out, _ = self.forward_packed(encodings, device, first_tokens_only=True)
            first = {"cls": out.last_hidden_state, "pooler": out.pooler_output}
            return self._finish([first[mode][: len(encodings)].float() for mode in self.pooling])
        out, layout = self.forward_packed(encodings, device)
        hidden, pooled = out.last_hidden_state, out.pooler_output
        vectors = self._finish([pool_packed(hidden, layout, mode, pooled) for mode in self.pooling])
        return vectors[: len(encodings)]

    @torch.inference_mode()
    def _run_padded(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        out, mask = self.forward_padded(encodings, device)
        return self._finish([pool(out.last_hidden_state, mask, mode, out.pooler_output) for mode in self.pooling])

    @torch.inference_mode()
    def _tokens_packed(self, encodings: list[Encoding], device: torch.device) -> list[Tensor]:
        out, _ = self.forward_packed(encodings, device)
        lengths = [len(e.ids) for e in encodings]
        return list(out.last_hidden_state[: sum(lengths)].float().split(lengths))

    @torch.inference_mode()
    def _tokens_padded(self, encodings: list[Encoding], device: torch.device) -> list[Tensor]:
        out, _ = self.forward_padded(encodings, device)
        return [out.last_hidden_state[row, : len(e.ids)].float() for row, e in enumerate(encodings)]

    def task_index(self, task: str | None) -> int | None:
        """The index of `task`'s adapter (default_task's when None), None for no task.

        Raises:
            ValueError: a task for a model without adapters, or an unknown one, naming the model's tasks.
        """
        return job_task_index(self, task)

    def _finish(self, vectors: list[Tensor]) -> Tensor:
        pooled = vectors[0] if len(vectors) == 1 else torch.cat(vectors, dim=-1)
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1) if self.normalize else pooled
        # sentence-transformers truncates after its Normalize module and does not re-normalize.
        return pooled[:, : self.dimension].contiguous()

    # --- sentence-transformers' members (SentenceTransformer has them under the same names) -----------

    @property
    def similarity_fn_name(self) -> str:
        """What similarity() computes: "cosine" (the default), "dot", "euclidean" or "manhattan"."""
        if self._similarity_fn_name is None:
            self._similarity_fn_name = "cosine"
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: Any) -> None:
        """A name, or a sentence_transformers.SimilarityFunction (its .value is the name); None: "cosine"
        on first use."""
        value = getattr(value, "value", value)  # a SimilarityFunction enum member
        if value is not None and value not in SIMILARITY_FUNCTIONS:
            hint = (
                " Use MultiVectorEncoder for MaxSim late-interaction scoring."
                if value in ("maxsim", "meanmaxsim")
                else ""
            )
            raise ValueError(
                f"{type(self).__name__} only supports similarity_fn_name in {list(SIMILARITY_FUNCTIONS)}, got "
                f"{value!r}.{hint}"
            )
        self._similarity_fn_name = value

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Tensor:
        """Every vector of embeddings1 against every vector of embeddings2, by similarity_fn_name.

        Args:
            embeddings1: (n, dim) or (dim,) vectors: a tensor, a numpy array, or a list of vectors.
            embeddings2: (m, dim) or (dim,) vectors.

        Returns:
            (n, m) float tensor of scores (higher is more similar), as sentence-transformers computes them.
        """
        return SIMILARITY_FUNCTIONS[self.similarity_fn_name][0](embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Tensor:
        """embeddings1[i] against embeddings2[i], by similarity_fn_name: an (n,) float tensor."""
        return SIMILARITY_FUNCTIONS[self.similarity_fn_name][1](embeddings1, embeddings2)

    def get_sentence_embedding_dimension(self) -> int:
        """The length of the vectors encode() returns (truncate_dim when set): `dimension`."""
        return self.dimension

    def get_embedding_dimension(self) -> int:
        """The same as get_sentence_embedding_dimension (sentence-transformers 6's newer name)."""
        return self.dimension

    def query_prompt_name(self, prompt_name: str | None, prompt: str | None) -> str | None:
        """The prompt encode_query uses: the one given, else the "query" prompt if the model has one, which
        wins over the default prompt (sentence-transformers' rule)."""
        return self._prompt_for("query", prompt_name, prompt)

    def document_prompt_name(self, prompt_name: str | None, prompt: str | None) -> str | None:
        """The prompt encode_document uses: the one given, else the first of "document", "passage" and
        "corpus" the model has (sentence-transformers' rule)."""
        return self._prompt_for("document", prompt_name, prompt)

    def encode_query(
        self, texts: Sequence[Text], prompt_name: str | None = None, prompt: str | None = None, **kwargs: Any
    ) -> Any:
        """encode() for search queries: with the model's "query" prompt unless one is given.

        Args:
            texts, prompt_name, prompt, **kwargs: as encode()'s.

        Returns:
            What encode() returns.
        """
        return self.encode(texts, prompt_name=self.query_prompt_name(prompt_name, prompt), prompt=prompt, **kwargs)

    def encode_document(
        self, texts: Sequence[Text], prompt_name: str | None = None, prompt: str | None = None, **kwargs: Any
    ) -> Any:
        """encode() for the documents searched: with the model's "document" (or "passage", "corpus") prompt
        unless one is given.

        Args:
            texts, prompt_name, prompt, **kwargs: as encode()'s.

        Returns:
            What encode() returns.
        """
        return self.encode(texts, prompt_name=self.document_prompt_name(prompt_name, prompt), prompt=prompt, **kwargs)

    # --- save()'s hooks (STBase's one save path): Pooling, then Normalize when normalizing ---------------

    def _st_modules(self) -> list[tuple[str, str, dict[str, Any], torch.nn.Module | None]]:
        """The Pooling module (and Normalize when normalizing) after the Transformer.

        Raises:
            ValueError: pooling "pooler", which sentence-transformers' Pooling lacks.
        """
        if "pooler" in self.pooling:
            raise ValueError("pooling='pooler' has no sentence-transformers Pooling mode, so no folder can say it")
        pooling = [ST_POOLING_NAMES.get(mode, mode) for mode in self.pooling]
        config = {
            "embedding_dimension": self.bert.config.hidden_size,
            "pooling_mode": pooling[0] if len(pooling) == 1 else pooling,
            "include_prompt": self.include_prompt,
        }
        modules: list[tuple[str, str, dict[str, Any], torch.nn.Module | None]] = [
            ("Pooling", POOLING_MODULE, config, None)
        ]
        if self.normalize:
            sentence = {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"}
            modules.append(("Normalize", NORMALIZE_MODULE, sentence, None))
        return modules

    def _st_config(self) -> dict[str, Any]:
        """A SentenceTransformer's config (an Embedder's folder is one), with similarity_fn_name."""
        config = {**super()._st_config(), "model_type": "SentenceTransformer"}
        return {**config, "similarity_fn_name": self.similarity_fn_name}


def _check_output_value(output_value: str) -> str:
    if output_value not in ("sentence_embedding", "token_embeddings"):
        raise ValueError(f"output_value={output_value!r} must be 'sentence_embedding' or 'token_embeddings'")
    return output_value
