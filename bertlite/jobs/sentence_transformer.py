"""`bertlite.SentenceTransformer`: the Embedder built and called as sentence-transformers' SentenceTransformer.

The constructor resolves the name and maps sentence-transformers' keywords through bertlite.jobs.st.base;
encode takes sentence-transformers' arguments in its order and returns its types; a multi-process pool
splits the CPU's cores between its processes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from bertlite.jobs.base import DEFAULT_MAX_TOKENS, GPU_MAX_TOKENS, Text
from bertlite.jobs.embedder import Embedder
from bertlite.jobs.inputs import check_count, check_texts
from bertlite.jobs.pooling import pool as pool_rows
from bertlite.jobs.process_pool import run_in_pool
from bertlite.jobs.st.base import LoadingKeywords, STBase, default_device, set_attention
from bertlite.jobs.st.keywords import arrays_as_lists, renamed_keywords
from bertlite.jobs.st.logs import prompt_over_name
from bertlite.jobs.st.names import SENTENCE_TRANSFORMERS_ORGANIZATION
from bertlite.jobs.st.processing import takes_processing_kwargs
from bertlite.jobs.st.task_encode import TaskEncode
from bertlite.util import quantize_embeddings

__all__ = ["SentenceTransformer", "default_device"]

# encode()'s precisions (quantize_embeddings's).
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
# encode() keywords sentence-transformers' Router models read; accepted and unused here (no Router).
IGNORED_ENCODE_KWARGS = ("task",)
# preprocess()'s keys that the base model takes.
BATCH_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _row(value: Any, row: int, rows: int) -> Any:
    """A batch output's row `row`: a tensor with the batch first is indexed, anything else is shared."""
    return value[row] if isinstance(value, Tensor) and value.ndim > 0 and value.shape[0] == rows else value


class SentenceTransformer(Embedder):
    """bertlite's Embedder, built and called as sentence-transformers' SentenceTransformer.

    `SentenceTransformer("all-MiniLM-L6-v2")` loads through Embedder.from_pretrained; encode takes
    sentence-transformers' arguments in its order and returns its types (one vector for one string,
    numpy by default, tensors or a list of tensors on request, quantized codes for a precision). Every
    other member is the Embedder's, but `tokenizer` and `tokenize` are sentence-transformers' (STBase's:
    transformers' tokenizer surface, padded input tensors). docs/migration.md lists what differs.
    """

    default_huggingface_organization = SENTENCE_TRANSFORMERS_ORGANIZATION
    # The similarity_fn_name values it takes, sentence-transformers' class attribute.
    SUPPORTED_SIMILARITY_FN_NAMES: ClassVar[tuple[str, ...]] = ("cosine", "dot", "euclidean", "manhattan")
    tokenizer = STBase.tokenizer
    tokenize = STBase.tokenize

    @renamed_keywords(tokenizer_kwargs="processor_kwargs")
    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        *,
        modules: list[Any] | None = None,
        device: str | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        cache_folder: str | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        local_files_only: bool = False,
        token: bool | str | None = None,
        use_auth_token: bool | str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        use_kernels: bool = False,
        kernel_config: Any = None,
        model_card_data: Any = None,
        backend: str = "torch",
        similarity_fn_name: Any = None,
        truncate_dim: int | None = None,
    ) -> None:
        """Load a sentence-transformers folder or hub model, as sentence-transformers' constructor does.

        Args:
            model_name_or_path: a local folder, a hub id, or a bare name resolved as sentence-transformers
                resolves it ("all-MiniLM-L6-v2" -> "sentence-transformers/all-MiniLM-L6-v2").
            modules: sentence-transformers' custom module lists; not supported (None only).
            device: where the model runs; None: CUDA if available, else MPS, else the CPU.
            prompts: added to the folder's prompts (these win on a shared name).
            default_prompt_name: the prompt used when encode gets none; None: the folder's.
            cache_folder, revision, local_files_only, token: hub options (LoadingKeywords).
            use_auth_token: the deprecated spelling of token.
            trust_remote_code, model_kwargs, processor_kwargs, config_kwargs, use_kernels, kernel_config,
                backend: as LoadingKeywords maps or refuses them; model_kwargs={"dtype": ...} picks the dtype
                (default: float32, as sentence-transformers; "auto": bertlite's fastest for this machine).
            model_card_data: sentence-transformers' model-card data; unused (no model card is written).
            similarity_fn_name: "cosine", "dot", "euclidean" or "manhattan"; None: the folder's, else cosine.
            truncate_dim: keep the first truncate_dim dimensions of every vector; None: all.

        Raises:
            ValueError: no model_name_or_path, or modules; what LoadingKeywords and Embedder.from_pretrained
                refuse.
            NotADirectoryError, FileNotFoundError: as resolve_model_name.
        """
        if token is not None and use_auth_token is not None:
            raise ValueError(
                "Both `token` and `use_auth_token` are passed; pass `token` only (`use_auth_token` is deprecated)"
            )
        if model_name_or_path is None or modules is not None:
            raise ValueError(
                "bertlite's SentenceTransformer loads a saved model: give model_name_or_path (a folder or hub id); "
                "building one from modules= is not supported"
            )
        token = token if token is not None else use_auth_token
        name, kwargs = self._by_name(model_name_or_path, None, LoadingKeywords.of(locals()))
        self._load(
            name,
            device=kwargs.pop("device"),
            dtype=kwargs.pop("dtype", None),
            pooling=None,
            normalize=None,
            max_length=None,
            unpad=True,
            prompts=prompts,
            default_prompt_name=default_prompt_name,
            truncate_dim=truncate_dim,
            quantize=None,
            allow_nonfinite=False,
            pack_weights=True,
            similarity_fn_name=getattr(similarity_fn_name, "value", similarity_fn_name),
            hub_kwargs=kwargs,
        )
        set_attention(self.model, model_kwargs)
        self.default_task = (model_kwargs or {}).get("default_task")
        self.task_index(None)  # an unknown default_task fails here, by name

    @renamed_keywords(sentences="inputs")
    @arrays_as_lists
    @takes_processing_kwargs
    def encode(  # type: ignore[override]
        self,
        inputs: Sequence[Text] | Text,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: str | None = "sentence_embedding",
        precision: str | None = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | list[str | Any] | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        pool: dict[str, Any] | None = None,
        chunk_size: int | None = None,
        *,
        max_tokens: int | None = None,
        on_long: str = "truncate",
        **kwargs: Any,
    ) -> Any:
        """Embed texts, with sentence-transformers' arguments and return types.

        Args:
            inputs: a string, or a list (or tuple) of strings or (text_a, text_b) pairs.
            prompt_name, prompt: the prompt put before every text; prompt wins over prompt_name; neither:
                the default prompt, if any.
            batch_size: texts per batch at most; a token budget (DEFAULT_MAX_TOKENS, on a GPU
                GPU_MAX_TOKENS) applies too unless max_tokens is given.
            show_progress_bar: a tqdm bar on stderr; None: shown when stderr is a terminal.
            output_value: "sentence_embedding", or "token_embeddings" (a list of (tokens, hidden) tensors,
                the base model's last hidden state at each text's tokens), or None: every output, a dict per
                text (all_outputs).
            precision: "float32" (or None), or "int8", "uint8", "binary", "ubinary" as
                bertlite.util.quantize_embeddings computes them (int8 / uint8 ranges from these embeddings).
            convert_to_numpy: a numpy array (the default); False: a list of tensors.
            convert_to_tensor: one tensor (wins over convert_to_numpy).
            device: one device: the model is moved there first (to()); None: where it is. A list of
                devices: a pool of processes on them for this call (start_multi_process_pool).
            normalize_embeddings: scale every vector to length 1 (after truncation).
            truncate_dim: keep the first truncate_dim dimensions; None: the model's truncate_dim.
            pool: a pool of start_multi_process_pool's to encode in.
            chunk_size: texts per task sent to a pool's process; None: about 10 tasks per process.
            max_tokens, on_long: bertlite's, as Embedder.encode's.
            **kwargs: "task": a model with task adapters runs that adapter (jina-embeddings-v3's; None: its
                default_task), another accepts it unused (sentence-transformers' Router models'); "processing_kwargs"
                ({"text": {"max_length": n, "truncation": True}}: this call's max_length; bertlite.jobs.st.processing).

        Returns:
            (n, dim) vectors as numpy float32 (int8 / uint8 codes for a precision), a tensor, or a list of
            tensors; one string in: its one vector. token_embeddings: a list of tensors. None: a list of dicts
            (one dict for one string).

        Raises:
            ValueError: an unknown precision or output_value, an unused keyword, a chunk_size below 1, or
                what Embedder.encode refuses (raised from a pool's process too).
            RuntimeError: a pool's process exited.
        """
        if unused := sorted(set(kwargs) - set(IGNORED_ENCODE_KWARGS)):
            raise ValueError(
                f"{type(self).__name__}.encode() has been called with additional keyword arguments that this model "
                f"does not use: {unused}"
            )
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"Precision {precision!r} is not supported, must be one of {list(PRECISIONS)}")
        precision = precision or "float32"  # None is float32, as in sentence-transformers
        if output_value not in ("sentence_embedding", "token_embeddings", None):
            raise ValueError(
                f"output_value={output_value!r}: bertlite returns 'sentence_embedding', 'token_embeddings' or None "
                "(every output)"
            )
        check_texts("inputs", inputs)
        check_count("batch_size", batch_size, none=None, must="a positive integer")
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        prompt_name = prompt_over_name(self.prompts, prompt, prompt_name)
        if prompt is None:
            prompt = self.resolve_prompt(None, prompt_name)
        if output_value is None:
            outputs = self._every_output(texts, batch_size, prompt, truncate_dim, precision, device, pool)
            return outputs[0] if single else outputs
        options = {"max_tokens": max_tokens, "on_long": on_long, "prompt": prompt, "truncate_dim": truncate_dim}
        options["output_value"] = output_value
        if getattr(self.bert.config, "lora_adaptations", None):
            options["task"] = kwargs.get("task")
        if pool is not None or (isinstance(device, list | tuple) and device):
            embeddings = self._encode_in_pool(texts, batch_size, pool, device, chunk_size, options)
        else:
            if device is not None:
                self.to(device)
            embeddings = self._embed(texts, batch_size, show_progress_bar, options)
        result = self._st_convert(
            embeddings, output_value, precision, convert_to_numpy, convert_to_tensor, normalize_embeddings
        )
        return result[0] if single else result

    @contextmanager
    def truncate_embeddings(self, truncate_dim: int | None) -> Iterator[None]:
        """Within this context encode() keeps the first truncate_dim dimensions (the model's truncate_dim is set,
        and put back on leaving), as sentence-transformers' truncate_embeddings.

        Args:
            truncate_dim: the dimensions to keep; None: all.

        Returns:
            A context manager.
        """
        original = self.truncate_dim
        try:
            self.truncate_dim = truncate_dim
            yield
        finally:
            self.truncate_dim = original

    def _every_output(
        self,
        texts: list[Text],
        batch_size: int,
        prompt: str,
        truncate_dim: int | None,
        precision: str,
        device: str | list[str | Any] | None,
        pool: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        """encode(output_value=None): all_outputs() here, after refusing what sentence-transformers cannot
        combine with it (a precision) or bertlite does not run with it (a pool of processes)."""
        if precision != "float32":
            raise ValueError(f"precision={precision!r} quantizes vectors; output_value=None returns every output")
        if pool is not None or isinstance(device, list | tuple):
            raise ValueError("output_value=None runs in this process: give no pool and one device")
        if device is not None:
            self.to(device)
        return self.all_outputs(texts, batch_size, prompt, truncate_dim)

    @torch.inference_mode()
    def all_outputs(
        self, texts: list[Text], batch_size: int = 32, prompt: str = "", truncate_dim: int | None = None
    ) -> list[dict[str, Any]]:
        """Every output of each text, as sentence-transformers' encode(output_value=None) gives them: batches of
        batch_size texts, longest (in characters) first, right-padded to their longest, so each text's padded
        width is the one its batch had there.

        Args:
            texts: strings or (text_a, text_b) pairs.
            batch_size: texts per batch.
            prompt: text put before each.
            truncate_dim: keep the first truncate_dim dimensions of sentence_embedding; None: the model's.

        Returns:
            One dict per text, in input order: preprocess()'s input_ids, token_type_ids, attention_mask (the
            batch's width), "modality" (and "prompt_length" with a prompt), token_embeddings ((width, hidden),
            the padding's rows included) and sentence_embedding, on the model's device.
        """
        truncate_dim = self._check_truncate_dim(truncate_dim)
        truncate_dim = truncate_dim if truncate_dim is not None else self.truncate_dim
        lengths = [len(t) if isinstance(t, str) else sum(len(part) for part in t) for t in texts]
        order = np.argsort([-n for n in lengths])  # sentence-transformers' order, its ties included
        outputs: list[dict[str, Any]] = [{} for _ in texts]
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            features = self.preprocess([texts[i] for i in rows], prompt=prompt or None)
            batch = {key: value.to(self.device) for key, value in features.items() if key in BATCH_INPUTS}
            out = self.bert(**batch, return_dict=True)
            hidden, mask = out.last_hidden_state.float(), batch["attention_mask"]
            sentence = self._finish([pool_rows(hidden, mask, mode, out.pooler_output) for mode in self.pooling])
            batch_outputs = {**features, **batch, "token_embeddings": hidden, "sentence_embedding": sentence}
            if truncate_dim is not None:
                batch_outputs["sentence_embedding"] = sentence[:, :truncate_dim]
            for j, i in enumerate(rows):
                outputs[i] = {key: _row(value, j, len(rows)) for key, value in batch_outputs.items()}
        return outputs

    def _st_convert(
        self,
        embeddings: Any,
        output_value: str,
        precision: str,
        convert_to_numpy: bool,
        convert_to_tensor: bool,
        normalize_embeddings: bool,
    ) -> Any:
        """Embedder.encode's float32 CPU tensor (or list of them) as sentence-transformers returns it."""
        on_device = self.device.type != "cpu"
        if output_value == "token_embeddings":
            if on_device:
                embeddings = [e.to(self.device) for e in embeddings]
            return quantize_embeddings(embeddings, precision) if embeddings and precision != "float32" else embeddings
        if normalize_embeddings:
            embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
        if convert_to_tensor:
            convert_to_numpy = False
        if len(embeddings) and precision != "float32":
            embeddings = quantize_embeddings(embeddings, precision)
        if convert_to_tensor:
            if not len(embeddings):
                return torch.tensor([], device=self.device)
            return (
                torch.as_tensor(embeddings).to(self.device)
                if on_device and precision == "float32"
                else torch.as_tensor(embeddings)
            )
        if convert_to_numpy:
            if not len(embeddings):
                return np.array([])
            return embeddings if isinstance(embeddings, np.ndarray) else embeddings.numpy()
        if isinstance(embeddings, np.ndarray):
            return list(torch.from_numpy(embeddings))
        return list(embeddings.to(self.device) if on_device else embeddings)

    def _embed(
        self, texts: list[Text], batch_size: int, show_progress_bar: bool | None, options: dict[str, Any]
    ) -> Any:
        """Embedder.encode as torch tensors: batch_size caps texts per batch, within the token budget."""
        if options["max_tokens"] is None and (self.unpad or self.device.type == "cuda"):
            options = {**options, "max_tokens": GPU_MAX_TOKENS if self.device.type == "cuda" else DEFAULT_MAX_TOKENS}
        return Embedder.encode(self, texts, batch_size, show_progress_bar, "torch", **options)

    def _encode_in_pool(
        self,
        texts: list[Text],
        batch_size: int,
        pool: dict[str, Any] | None,
        devices: list[Any] | None,
        chunk_size: int | None,
        options: dict[str, Any],
    ) -> Any:
        """encode's texts in chunks of chunk_size over a pool's processes (a pool started for `devices` and
        stopped after, when no pool is given), gathered in input order."""
        if not texts:
            return self._embed(texts, batch_size, False, options)
        kwargs = {"batch_size": batch_size, "show_progress_bar": False, "options": options}
        results = run_in_pool(self, "_embed", texts, pool, devices, chunk_size, kwargs)
        if options["output_value"] == "token_embeddings":
            return [tokens for result in results for tokens in result]
        return torch.cat(results)

    # sentence-transformers' encode_query and encode_document: encode() with the task's prompt and the task.
    encode_query = TaskEncode("query")
    encode_document = TaskEncode("document")
