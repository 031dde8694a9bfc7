"""What every job shares: a model and its tokenizer, length-sorted batches, the packed forward.

Embedder (vectors), CrossEncoder (scores), SparseEncoder (SPLADE) and MultiVectorEncoder (ColBERT)
differ only in what they make of the base model's output; tokenizing, truncation, batching by a
token budget and the unpadded forward are here, once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor, nn

from bertlite.errors import Int8PrecisionWarning
from bertlite.jobs import bars
from bertlite.jobs.batches import (  # noqa: F401 (the jobs import them from here too)
    HEAD_ROWS_MULTIPLE,
    concatenated,
    on_whole_blocks,
    shape_tokens,
    sorted_batches,
    to_device,
)

# The input checks live in jobs/inputs.py; the jobs and the CLI import them from here too.
from bertlite.jobs.inputs import (  # noqa: F401
    TEXTS,
    Text,
    check_count,
    check_text,
    check_texts,
    progress_bar,
    prompt_names,
    with_prompt,
)
from bertlite.jobs.long_texts import TextCutter
from bertlite.jobs.prepare import (  # noqa: F401 (LoadOptions: its old home)
    AUTO_VERDICTS,
    BF16_COMPUTE,
    INT8_PENDING,
    LoadOptions,
    check_device,
    ready,
    unready,
)
from bertlite.jobs.tasks import adapter_mask
from bertlite.layers.packing import PackedLayout
from bertlite.models.bert import BertModel
from bertlite.quant.int8 import is_quantized, quantize_int8
from bertlite.tokenization import BatchEncoding
from bertlite.utils.warn import warn_user

if TYPE_CHECKING:
    from typing import Self  # Python 3.11; annotations only (they are strings here)

# Default batching of the unpadded path: a budget of batch size x longest text,
# measured best here for fp32 and bf16 (small enough that activations stay in
# cache, large enough for efficient GEMMs); the padded path keeps 32 texts.
DEFAULT_MAX_TOKENS = 2048
DEFAULT_BATCH_SIZE = 32
MAX_BATCH_SIZE = 256
# Texts tokenized and sorted together: large enough that sorting removes most
# padding, small enough that memory stays flat however long the input (a chunk's
# encodings, overflow included, are the largest thing a long encode holds).
CHUNK_TEXTS = 2048
# On a GPU: a forward's token budget (activations of a few hundred MB even for BERT-large at this size) and
# texts per chunk large enough that a chunk is several such forwards, so the host's per-chunk work (sorting,
# waiting for the results) is a small share; the next chunk is tokenized while this one runs.
GPU_MAX_TOKENS = 65536
GPU_CHUNK_TEXTS = 16384

M = TypeVar("M", bound=nn.Module)


@dataclass
class EncodeStats:
    """What the last encode() did, for summaries and benchmarks."""

    texts: int = 0
    tokens: int = 0  # real tokens, [CLS]/[SEP] included
    truncated: int = 0
    padded_tokens: int = 0  # sum of batch size x longest text: the padded grid of each batch


class BaseEncoder:
    """A BERT model (BertModel or a head) and its tokenizer: texts in, one result per text out.

    Subclasses say what a batch's result is: _run_packed (packed rows, the default path) and
    _run_padded (right-padded batches, unpad=False).
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        *,
        max_length: int | None = None,
        unpad: bool = True,
        pack_weights: bool = True,
    ) -> None:
        """Wrap a loaded model and tokenizer.

        The model is readied for inference in place (bertlite.jobs.prepare.ready: eval mode, its
        device's fast modules) unless its attn_implementation is "eager", the reference.

        Args:
            model: a BertModel, or a head whose base model is `model.base_model` (`bert`, `roberta`, ...).
            tokenizer: its tokenizer (a `tokenizers` Tokenizer, or a transformers-style one, whose
                backend_tokenizer runs); a copy is kept (truncation set, padding off), so the caller's
                keeps its settings.
            max_length: tokens per text, longer ones truncated; None: the model's
                max_position_embeddings, and a larger value is clamped to it.
            unpad: run packed batches, real tokens only; False: padded batches, as transformers runs them.
            pack_weights: ready's pack_weights.
        """
        # dtype="bfloat16" on the CPU: float32 Parameters, bf16 GEMM inputs (jobs.prepare.ready's compute).
        self._compute = torch.bfloat16 if model in BF16_COMPUTE else None
        BF16_COMPUTE.discard(model)
        self.model = ready(model, pack_weights=pack_weights, compute=self._compute)
        self.pack_weights = pack_weights  # to() readies the model again with it
        self.bert: BertModel = model if isinstance(model, BertModel) else model.base_model
        self.unpad = unpad
        # A copy of its own: truncation is set on the tokenizer (once, not per call, so threads can share
        # this encoder), and the caller's tokenizer, or another encoder's, must keep its own settings.
        # Padding stored in a tokenizer.json would count pad tokens as text; batches are padded here.
        self._set_backend(tokenizer)
        self.max_length = max_length
        self.last_stats = EncodeStats()
        self._auto = AUTO_VERDICTS.pop(model, None)  # dtype="auto": settle_auto holds bfloat16 to the job's bar
        self._int8 = INT8_PENDING.pop(model, None)  # dtype="int8": settle_auto quantizes and holds int8 to it
        self._precision_reason = _asked_for(self.precision)

    @property
    def max_length(self) -> int:
        """Tokens per text; longer texts are truncated (longest segment first) or refused (on_long="error").

        Set it to None for the model's max_position_embeddings; a larger value is clamped to that.
        """
        return self._max_length

    @max_length.setter
    def max_length(self, value: int | None) -> None:
        """None: the model's max_position_embeddings; a larger value is clamped to it."""
        check_count("max_length", value, none="the model's max_position_embeddings")
        limit = self.bert.config.max_sequence_length  # max_position_embeddings (RoBERTa's: less 2)
        # Set on this encoder's own tokenizer here, not per call: encode() may run in several threads at once.
        self._max_length = limit if value is None else min(value, limit)
        self.backend_tokenizer.enable_truncation(self._max_length, strategy="longest_first")
        self._cutter = TextCutter(self.backend_tokenizer, self._max_length)

    @property
    def max_seq_length(self) -> int:
        """sentence-transformers' name for max_length: tokens per input, longer inputs truncated."""
        return self.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int | None) -> None:
        self.max_length = value

    def get_max_seq_length(self) -> int:
        """max_seq_length, as sentence-transformers' method gives it."""
        return self.max_length

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move the model to a device and/or cast it to a dtype, as torch.nn.Module.to, and ready it there.

        The device's fast modules are chosen again (bertlite.jobs.prepare.ready): the plain modules are
        put back (bertlite.layers.onednn.restore), moved, then readied for the new device and dtype.

        Args:
            *args, **kwargs: what torch.nn.Module.to takes (a device, a dtype, or both).

        Returns:
            This encoder.

        Raises:
            ValueError: a device this machine cannot use, or an int8 model moved off the CPU or cast.
        """
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        device = check_device(device)
        if (device is None or device == self.device) and (dtype is None or dtype == self.dtype):
            return self
        if is_quantized(self.bert):
            raise ValueError(
                "this model is int8-quantized, which runs on the CPU in int8 only; load it again with the "
                "device and dtype you want (from_pretrained(device=..., dtype=...))"
            )
        unready(self.model)
        self.model.to(*args, **kwargs)
        self._moved(*args, **kwargs)
        if dtype is not None:  # a cast: the model computes in its new dtype
            self._compute = None
        ready(self.model, pack_weights=self.pack_weights, compute=self._compute)
        return self

    def _moved(self, *args: Any, **kwargs: Any) -> None:
        """Move what the job keeps beside its model (MultiVectorEncoder's projection)."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's Parameters: float32 unless asked otherwise. With dtype="bfloat16" or "auto" on
        the CPU they stay float32, and `precision` names what the GEMMs compute in."""
        return self.bert.dtype

    @property
    def device(self) -> torch.device:
        """The device the model runs on."""
        return self.bert.device

    @property
    def precision(self) -> str:
        """What the Linear layers compute in, by name: "int8" for a quantized model, "bfloat16" for a float32 model
        whose GEMMs take bf16 inputs (dtype="bfloat16" or "auto" on the CPU), else the dtype's name."""
        if is_quantized(self.bert):
            return "int8"
        return str(self._compute or self.dtype).removeprefix("torch.")

    @property
    def precision_reason(self) -> str:
        """One line: the precision this job runs in and why (dtype="auto"'s verdict and the job's bar)."""
        return self._precision_reason

    def settle_auto(self) -> Self:
        """Settle a fast mode the job was loaded with: dtype="auto" runs bfloat16 only where the CPU runs it faster
        and the job meets its bar; dtype="int8" is quantized and held to the job's int8 bar (settle_int8).

        The model was loaded in float32. Where the CPU's verdict is bfloat16 (bertlite.utils.auto_dtype), the
        job's answers on bars.CALIBRATION_TEXTS in float32 and with its GEMMs on bfloat16 inputs (the rest in
        float32: jobs.prepare.ready's compute) are held to its bar with bars.AUTO_MARGIN to spare, so other texts
        keep the bar too (bertlite.jobs.bars); a model that misses
        it runs float32 again, exactly: its float32 Parameters are never changed. A job not loaded with "auto"
        is left as it is. Each job's constructor calls this last, once its own settings are in place.

        Returns:
            This encoder.
        """
        if self._int8 is not None:
            return self.settle_int8()
        verdict, self._auto = self._auto, None
        if verdict is None:
            return self
        if verdict.dtype == "float32" or self.device.type != "cpu":
            self._precision_reason = f"float32: dtype='auto' keeps float32 here: {verdict.reason}"
            return self
        reference = self._bar_outputs()
        self._compute_in(torch.bfloat16)
        measured = self._bar(reference, self._bar_outputs(), "bfloat16", bars.AUTO_MARGIN)
        if measured.passed:
            self._precision_reason = (
                f"bfloat16: dtype='auto' picks it: {verdict.reason}; this job's bar: {measured.summary}"
            )
            return self
        self._compute_in(None)  # the float32 Parameters were never changed: exactly float32 again
        self._precision_reason = (
            f"float32: dtype='auto' keeps float32: bfloat16 misses this job's bar ({measured.summary}), "
            f"though {verdict.reason}"
        )
        return self

    def settle_int8(self) -> Self:
        """For dtype="int8": quantize the float32 model (bertlite.quant.int8.quantize_int8, calibrated with its
        tokenizer) and hold the job's answers on bars.CALIBRATION_TEXTS to its int8 bar. int8 was asked for, so it
        runs either way; where it misses the bar an Int8PrecisionWarning says so, and precision_reason keeps the
        measure.

        Returns:
            This encoder.
        """
        tokenizer, self._int8 = self._int8, None
        reference = self._bar_outputs()
        unready(self.model)  # float32's modules and attention out, so the int8 model is readied as one
        quantize_int8(self.model, tokenizer)
        ready(self.model, pack_weights=self.pack_weights)
        measured = self._bar(reference, self._bar_outputs(), "int8")
        self._precision_reason = f"int8: asked for; this job's bar on the calibration texts: {measured.summary}"
        if not measured.passed:
            warn_user(
                f"int8 misses this job's bar on bertlite's calibration texts ({measured.summary}); float32 (the "
                "default) or dtype='auto' keep it",
                Int8PrecisionWarning,
            )
        return self

    def _compute_in(self, compute: torch.dtype | None) -> None:
        """Ready the float32 model again, its GEMMs on `compute` inputs (None: float32 throughout)."""
        unready(self.model)
        self._compute = compute
        ready(self.model, pack_weights=self.pack_weights, compute=compute)

    def _bar_outputs(self) -> Any:
        """The job's answer on bars.CALIBRATION_TEXTS, for settle_auto."""
        raise NotImplementedError

    def _bar(self, reference: Any, fast: Any, mode: str, margin: float = 1.0) -> bars.Measured:
        """Hold a fast mode's _bar_outputs to float32's by the job's bar (bertlite.jobs.bars), `margin` inside it."""
        raise NotImplementedError

    @property
    def tokenizer(self) -> Tokenizer:
        """The `tokenizers` backend this encoder runs (truncation at max_length, no padding)."""
        return self.backend_tokenizer

    @tokenizer.setter
    def tokenizer(self, value: Tokenizer) -> None:
        """Run `value` as it is (its truncation and padding settings are the caller's)."""
        self.backend_tokenizer = value

    def _set_backend(self, tokenizer: Any) -> None:
        """Run a copy of `tokenizer` (a `tokenizers` Tokenizer, or a transformers-style tokenizer's
        backend_tokenizer): padding off, truncation at max_length (once that is set)."""
        tokenizer = getattr(tokenizer, "backend_tokenizer", tokenizer)
        self.backend_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.backend_tokenizer.no_padding()
        # Whether a single text's token types are all 0 (BERT's template), so packed batches of single texts
        # need not read them.
        self._single_types_zero = not any(self.backend_tokenizer.encode("").type_ids)
        self.pad_id = pad_id(self.backend_tokenizer, self.bert.config.pad_token_id)
        if hasattr(self, "_max_length"):
            self.max_length = self._max_length  # truncation and the text cutter, on the new backend

    def encodings(self, texts: Sequence[Text], on_long: str = "truncate", first_index: int = 0) -> list[Encoding]:
        """Tokenize texts, truncated to max_length (longest segment first, as transformers does): the step
        encode_tokenized() runs on, which a server takes once per request.

        Args:
            texts: strings, or (text_a, text_b) pairs.
            on_long: "truncate" (default) or "error": a ValueError for a text longer than max_length.
            first_index: index of texts[0] in the caller's input, for error messages.

        Returns:
            One tokenizers.Encoding per text, unpadded, in input order.

        Raises:
            ValueError: a text that is not a str or a pair of str, or holds a lone surrogate; a text
                too long under on_long="error"; an unknown on_long.
            TypeError: `texts` not a list of texts.
        """
        check_texts("texts", texts, TEXTS, one_str=False)
        return self._encode_texts(texts, on_long, first_index)

    def tokenize(self, texts: Sequence[Text], on_long: str = "truncate", first_index: int = 0) -> list[Encoding]:
        """encodings() under the Embedder's older name (sentence-transformers' classes give tokenize its meaning
        there: padded input tensors)."""
        return self.encodings(texts, on_long, first_index)

    def preprocess(self, inputs: Sequence[Text], prompt: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """The model's inputs for texts, right-padded, as sentence-transformers' preprocess gives them.

        Args:
            inputs: strings, or (text_a, text_b) pairs.
            prompt: text put before each input (before the first text of a pair); None: none.
            **kwargs: sentence-transformers' processing options; none is supported.

        Returns:
            A BatchEncoding (a dict): input_ids, token_type_ids and attention_mask as (B, T) int64 tensors on
            the CPU, "modality": "text", and with a prompt "prompt_length": its tokens, [CLS] included; a
            plain empty dict for no inputs.

        Raises:
            ValueError: a keyword argument, or a text encodings() refuses.
        """
        if kwargs:
            raise ValueError(f"preprocess() takes no processing options here; got {sorted(kwargs)}")
        check_texts("inputs", inputs, TEXTS, one_str=False)
        encodings = self._encode_texts(with_prompt(list(inputs), prompt or ""))
        if not encodings:
            return {}
        features: dict[str, Any] = {**self.collate(encodings, torch.device("cpu")), "modality": "text"}
        if prompt:
            features["prompt_length"] = len(self.backend_tokenizer.encode(prompt).ids) - 1  # less the closing [SEP]
        return BatchEncoding(features, encodings)

    def _encode_texts(self, texts: Sequence[Text], on_long: str = "truncate", first_index: int = 0) -> list[Encoding]:
        """encodings() as the jobs run it inside (a subclass may give the public name another meaning)."""
        return self._tokenize_with(self.backend_tokenizer, self._cutter, texts, on_long, first_index)

    def _tokenize_with(
        self, tokenizer: Tokenizer, cutter: TextCutter, texts: Sequence[Text], on_long: str, first_index: int = 0
    ) -> list[Encoding]:
        """encodings() with another truncation: `tokenizer` truncating at cutter.max_length tokens."""
        texts = list(texts)
        for i, text in enumerate(texts):
            check_text(text, first_index + i)
        # A long text is read only as far as max_length needs (the same ids), so memory stays bounded.
        encodings = tokenizer.encode_batch([_cut(cutter, text) for text in texts])
        if on_long == "error":
            for i, e in enumerate(encodings):
                if e.overflowing:
                    raise ValueError(
                        f"text {first_index + i} (0-based) is longer than max_length={cutter.max_length} tokens; "
                        "truncate it (on_long='truncate', CLI --on-long truncate) or raise the max length "
                        "(max_length=, CLI --max-length)"
                    )
        elif on_long != "truncate":
            raise ValueError(f"on_long={on_long!r} must be 'truncate' or 'error'")
        return encodings

    def _set_prompts(self, prompts: dict[str, str] | None, default_prompt_name: str | None) -> None:
        """Keep the named prompts and the default one's name.

        Raises:
            ValueError: a default_prompt_name not in prompts.
        """
        self.prompts = dict(prompts or {})
        if default_prompt_name is not None and default_prompt_name not in self.prompts:
            raise ValueError(
                f"Default prompt name {default_prompt_name!r} not found in the configured prompts dictionary with "
                f"keys {list(self.prompts)}."
            )
        self.default_prompt_name = default_prompt_name

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """Pick the text put before every input, as sentence-transformers picks it.

        Args:
            prompt: the text itself; wins over prompt_name.
            prompt_name: a key of `prompts`; None: the default prompt, if any.

        Returns:
            prompt, else prompts[prompt_name], else the default prompt, else "".

        Raises:
            ValueError: an unknown prompt_name.
        """
        if prompt is not None:
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(f"prompt_name={name!r} is not one of the prompts {prompt_names(self.prompts)}")
        return self.prompts[name]

    def count_tokens(self, text: str) -> int:
        """The tokens of a whole text, [CLS] and [SEP] included, without truncation; read a piece at a
        time, so a long text costs no more memory than max_length tokens do.

        Args:
            text: the text (prompt included, if any).

        Returns:
            The token count.
        """
        return self._cutter.count(text) + self.backend_tokenizer.num_special_tokens_to_add(False)

    def _cut(self, text: Text) -> Text:
        """`text` shortened to what truncation keeps plus a margin, with the same ids (TextCutter)."""
        return _cut(self._cutter, text)

    def _batch_limits(self, batch_size: int | None, max_tokens: int | None) -> tuple[int, int | None]:
        """batch_size and max_tokens, checked, with the defaults filled in."""
        check_count("batch_size", batch_size)
        check_count("max_tokens", max_tokens)
        on_gpu = self.device.type == "cuda"
        if batch_size is None and max_tokens is None:
            if on_gpu:
                return GPU_CHUNK_TEXTS, GPU_MAX_TOKENS
            return (MAX_BATCH_SIZE, DEFAULT_MAX_TOKENS) if self.unpad else (DEFAULT_BATCH_SIZE, None)
        return batch_size or (GPU_CHUNK_TEXTS if on_gpu else MAX_BATCH_SIZE), max_tokens

    @property
    def chunk_texts(self) -> int:
        """Texts tokenized and sorted together (CHUNK_TEXTS; GPU_CHUNK_TEXTS on a GPU)."""
        return GPU_CHUNK_TEXTS if self.device.type == "cuda" else CHUNK_TEXTS

    def tokenized_chunks(
        self, texts: Iterator[Text], prefix: str, on_long: str, first_row: int = 0
    ) -> Iterator[tuple[int, int, list[Encoding]]]:
        """Read and tokenize `texts` a chunk at a time; on a GPU the next chunk is read and tokenized in a
        thread while the caller runs this one (tokenizers releases the GIL), so the GPU does not wait for it.

        Args:
            texts: an iterator of texts, read chunk_texts at a time.
            prefix: the prompt put before each text.
            on_long: as in encodings().
            first_row: the row number of the first text, for error messages.

        Yields:
            (start, count, encodings): the chunk's first row number, its text count, encodings()'s output.

        Raises:
            ValueError: as encodings(), for the chunk it is yielding, in order.
        """

        def take(start: int) -> tuple[int, int, list[Encoding]]:
            chunk = list(itertools.islice(texts, self.chunk_texts))
            return start, len(chunk), self._encode_texts(with_prompt(chunk, prefix), on_long, first_index=start)

        if self.device.type != "cuda":
            start = first_row
            while (item := take(start))[1]:
                yield item
                start += item[1]
            return
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(take, first_row)
            while (item := future.result())[1]:
                future = pool.submit(take, item[0] + item[1])
                yield item

    def run_to_host(
        self,
        encodings: list[Encoding],
        batch_size: int,
        max_tokens: int | None,
        stats: EncodeStats,
        on_batch: Callable[[int], Any] | None = None,
    ) -> list[tuple[list[int], Tensor]]:
        """_run_sorted for batches whose result is one tensor, gathered on the host.

        On a GPU every batch is launched before any result is waited for: each result is copied to pinned
        host memory as it is queued, and the host waits once, at the end, so it never holds the GPU up
        between batches.

        Args:
            encodings, batch_size, max_tokens, stats: as in _run_sorted.
            on_batch: called with each batch's text count as it is queued (a progress bar's update).

        Returns:
            (rows, result) per batch, the results on the CPU.
        """
        results = []
        for rows, result in self._run_sorted(encodings, batch_size, max_tokens, stats):
            results.append((rows, result.to("cpu", non_blocking=True)))
            if on_batch is not None:
                on_batch(len(rows))
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return results

    def _run_sorted(
        self,
        encodings: list[Encoding],
        batch_size: int,
        max_tokens: int | None,
        stats: EncodeStats,
        run: Callable[[list[Encoding], torch.device], Any] | None = None,
    ) -> Iterator[tuple[list[int], Any]]:
        """Run `encodings` in batches of similar length, longest first.

        Args:
            encodings: encodings()'s output.
            batch_size, max_tokens: the limits of one batch (see _batch_limits).
            stats: counts added to.
            run: what a batch's result is; None: _run_packed, or _run_padded with unpad=False.

        Yields:
            (rows, result): the batch's indices into `encodings` and what _run_packed / _run_padded
            returned for it, in the same order.
        """
        lengths = [len(e.ids) for e in encodings]
        tokens = sum(lengths)
        stats.tokens += tokens
        stats.truncated += sum(bool(e.overflowing) for e in encodings)
        order = sorted(range(len(encodings)), key=lengths.__getitem__, reverse=True)
        device = self.device
        run = run or (self._run_packed if self.unpad else self._run_padded)
        for rows in sorted_batches(order, lengths, batch_size, max_tokens):
            batch = [encodings[i] for i in rows]
            stats.padded_tokens += len(batch) * len(batch[0].ids)
            yield rows, run(batch, device)

    def _run_packed(self, encodings: list[Encoding], device: torch.device) -> Any:
        """One packed batch's result; see forward_packed."""
        raise NotImplementedError

    def _run_padded(self, encodings: list[Encoding], device: torch.device) -> Any:
        """One padded batch's result; see forward_padded."""
        raise NotImplementedError

    def forward_packed(
        self, encodings: list[Encoding], device: torch.device, first_tokens_only: bool = False
    ) -> tuple[Any, PackedLayout]:
        """The base model on `encodings` packed into one row per token, real tokens only.

        Filler sequences of [PAD] bring the token count up to one of a few shapes (see shape_tokens);
        they come after the real ones, so the first sum(lengths) rows of last_hidden_state and the
        first len(encodings) rows of pooler_output are the real ones.

        Args:
            encodings: the batch.
            device: where the model runs.
            first_tokens_only: the last layer computes only each text's first token ([CLS]), all a
                [CLS] or pooler head reads: last_hidden_state is then one row per text, then filler
                rows up to a count on the same grid of shapes.

        Returns:
            (output, layout): the BertModel output (last_hidden_state (N, H), pooler_output) and the
            PackedLayout it ran with, filler sequences included.
        """
        lengths = [len(e.ids) for e in encodings]
        total = sum(lengths)
        # The grid of shapes is for oneDNN's per-shape caches on the CPU; a GPU's GEMMs need no filler.
        on_grid = device.type == "cpu"
        filler = shape_tokens(total) - total if on_grid else 0
        widest = max(lengths)
        fill = [widest] * (filler // widest) + ([filler % widest] if filler % widest else [])
        # Built on the host, then copied once (from pinned memory, without waiting, on a GPU).
        ids = to_device(concatenated([e.ids for e in encodings], filler, self.pad_id), device)
        # Encodings of other kinds (a pair's PairIds, a request's token ids) are read as they are.
        if self._single_types_zero and all(getattr(e, "n_sequences", 0) == 1 for e in encodings):
            types = torch.zeros_like(ids)  # single texts: all type 0, as the tokenizer was seen to give
        else:
            types = to_device(concatenated([e.type_ids for e in encodings], filler, 0), device)
        layout = PackedLayout.from_lengths(torch.tensor(lengths + fill), self.dtype, device=device)
        first_token_of = None
        if first_tokens_only:
            # Repeats of the first text fill the rows up to the grid, so the last layer's GEMMs meet few shapes.
            first_token_of = torch.zeros(shape_tokens(len(lengths)) if on_grid else len(lengths), dtype=torch.long)
            first_token_of[: len(lengths)] = torch.arange(len(lengths))
            first_token_of = to_device(first_token_of, device)
        tasks = adapter_mask(encodings, len(lengths) + len(fill), device)  # each text's task adapter, if any
        out = self.bert(
            input_ids=ids, token_type_ids=types, layout=layout, first_token_of=first_token_of, return_dict=True, **tasks
        )
        return out, layout

    def forward_padded(self, encodings: list[Encoding], device: torch.device) -> tuple[Any, Tensor]:
        """The base model on `encodings` right-padded to the longest.

        Returns:
            (output, attention_mask): the BertModel output ((B, T, H) last_hidden_state) and the (B, T) mask.
        """
        batch = self.collate(encodings, device)
        return self.bert(**batch, return_dict=True), batch["attention_mask"]

    def collate(self, encodings: list[Encoding], device: torch.device) -> dict[str, Tensor]:
        """input_ids, token_type_ids and attention_mask of `encodings`, right-padded to the longest, and their
        adapter_mask when a text has a task (jobs.tasks)."""
        width = max(len(e.ids) for e in encodings)
        ids = torch.full((len(encodings), width), self.pad_id, dtype=torch.long)
        types = torch.zeros((len(encodings), width), dtype=torch.long)
        mask = torch.zeros((len(encodings), width), dtype=torch.long)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = torch.tensor(e.ids)
            types[row, :n] = torch.tensor(e.type_ids)
            mask[row, :n] = 1
        return {
            "input_ids": ids.to(device),
            "token_type_ids": types.to(device),
            "attention_mask": mask.to(device),
            **adapter_mask(encodings, len(encodings), device),
        }


def _asked_for(precision: str) -> str:
    """precision_reason for a job not loaded with dtype="auto"."""
    if precision == "float32":
        return "float32: the reference's numbers (dtype='auto' asks for the fastest mode that keeps the job's bar)"
    return f"{precision}: asked for"


def pad_id(tokenizer: Tokenizer, config_pad_id: int | None) -> int:
    """The id a job pads with: the model config's pad_token_id (the id transformers' tokenizers pad with, and
    the one RoBERTa's and MPNet's positions skip), else the tokenizer's [PAD] or <pad>, else 0.

    Args:
        tokenizer: the job's tokenizer.
        config_pad_id: the model config's pad_token_id.

    Returns:
        The pad id.
    """
    if config_pad_id is not None and 0 <= config_pad_id < tokenizer.get_vocab_size():
        return config_pad_id
    found = (tokenizer.token_to_id(token) for token in ("[PAD]", "<pad>"))
    return next((i for i in found if i is not None), 0)


def _cut(cutter: TextCutter, text: Text) -> Text:
    """`text` shortened to what `cutter`'s truncation keeps plus a margin, with the same ids."""
    if isinstance(text, str):
        return cutter.cut(text)
    first, second = cutter.cut_pair(*text)
    return text if first is text[0] and second is text[1] else (first, second)
