"""Text to vectors: tokenizer, length-sorted batching, pooling. `Embedder.encode`.

A sentence-transformers folder's settings (pooling, normalization, max length, prompts)
come from bertlite.embed.st_config, so the vectors are those SentenceTransformer(...).encode
gives, without importing it or transformers.
"""

from __future__ import annotations

import itertools
import operator
import os
import sys
from collections.abc import Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor

from bertlite.config import BertConfig
from bertlite.embed.io import SURROGATE
from bertlite.embed.long_texts import TextCutter
from bertlite.embed.st_config import (
    DEFAULT_NORMALIZE,
    DEFAULT_POOLING,
    POOLING_MODES,
    _check_pooling,
    read_sentence_transformers_prompts,
    read_sentence_transformers_settings,
)
from bertlite.layers.onednn import optimize
from bertlite.layers.packing import PackedLayout
from bertlite.models.bert import BertModel
from bertlite.quant.int8 import check_quantize, count_int8_tokens, is_quantized, quantize_int8
from bertlite.tokenization import load_tokenizer
from bertlite.utils.capabilities import resolve_dtype

# Default batching of the unpadded path: a budget of batch size x longest text,
# measured best here for fp32 and bf16 (small enough that activations stay in
# cache, large enough for efficient GEMMs); the padded path keeps 32 texts.
DEFAULT_MAX_TOKENS = 2048
DEFAULT_BATCH_SIZE = 32
MAX_BATCH_SIZE = 256
# Texts tokenized and sorted together: large enough that sorting removes most
# padding, small enough that memory stays flat however long the input (a chunk's
# encodings, overflow included, are the largest thing encode_chunks holds).
CHUNK_TEXTS = 2048
# A lone UTF-16 surrogate is not Unicode text: no tokenizer takes it, UTF-8 cannot hold it.

Text = str | tuple[str, str]


@dataclass
class EncodeStats:
    """What the last encode() did, for summaries and benchmarks."""

    texts: int = 0
    tokens: int = 0  # real tokens, [CLS]/[SEP] included
    truncated: int = 0
    padded_tokens: int = 0  # sum of batch size x longest text: the padded grid of each batch


# --- pooling ----------------------------------------------------------------------


POOLER_NEEDED = "pooling='pooler' needs a model with a pooler (add_pooling_layer=True)"


def pool_packed(hidden: Tensor, layout: PackedLayout, mode: str, pooler_output: Tensor | None = None) -> Tensor:
    """Pool packed token rows into one vector per sequence.

    Segment sums over each sequence's own rows, so padding cannot count. Accumulates in float32.

    Args:
        hidden: the model's packed last hidden state, (total_tokens, H).
        layout: the PackedLayout the rows were packed with.
        mode: one of POOLING_MODES ("cls", "pooler", "max", "mean", "mean_sqrt_len").
        pooler_output: the model's (B, H) BertPooler output, for mode 'pooler'; None otherwise.

    Returns:
        (B, H) float32 vectors, one per sequence.

    Raises:
        ValueError: `mode` is unknown, or 'pooler' without a pooler_output.
    """
    if mode == "cls":
        return hidden[layout.starts].float()
    if mode == "pooler":
        if pooler_output is None:
            raise ValueError(POOLER_NEEDED)
        return pooler_output.float()
    hidden = hidden.float()
    batch = (layout.batch_size, hidden.shape[1])
    rows = layout.sequence_index
    if mode == "max":
        index = rows[:, None].expand_as(hidden)
        return hidden.new_empty(batch).scatter_reduce_(0, index, hidden, "amax", include_self=False)
    summed = hidden.new_zeros(batch).index_add_(0, rows, hidden)
    counts = layout.lengths[:, None].to(hidden.dtype)
    if mode == "mean":
        return summed / counts
    if mode == "mean_sqrt_len":
        return summed / counts.sqrt()
    raise ValueError(f"pooling={mode!r} is not one of {', '.join(POOLING_MODES)}")


def pool(last_hidden_state: Tensor, attention_mask: Tensor, mode: str, pooler_output: Tensor | None = None) -> Tensor:
    """pool_packed() for a right-padded batch: its real tokens packed first.

    Args:
        last_hidden_state: (B, T, H) hidden states.
        attention_mask: (B, T), 1 for real tokens; every row needs at least one.
        mode: one of POOLING_MODES.
        pooler_output: the model's (B, H) BertPooler output, for mode 'pooler'; None otherwise.

    Returns:
        (B, H) float32 vectors, one per sequence.
    """
    mask = attention_mask.to(device=last_hidden_state.device, dtype=torch.bool)
    if not bool(mask.any(dim=1).all()):
        raise ValueError("attention_mask has a row without any token; every sequence needs at least one")
    return pool_packed(last_hidden_state[mask], PackedLayout.from_mask(mask.long()), mode, pooler_output)


# --- the embedder -----------------------------------------------------------------


class Embedder:
    """A BertModel, its tokenizer and a pooling: texts in, one vector per text out."""

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

        Raises:
            ValueError: an unknown pooling mode, "pooler" without a pooler, a default_prompt_name not
                in prompts, or truncate_dim outside 1..dimension.
        """
        self.model = model.eval()
        if model.attn_implementation != "eager":
            optimize(model, pack_weights=pack_weights)
        self.unpad = unpad
        # A copy of its own: truncation is set on the tokenizer (once, not per call, so threads can share
        # this Embedder), and the caller's tokenizer, or another Embedder's, must keep its own settings.
        # Padding stored in a tokenizer.json would count pad tokens as text; Embedder pads per batch.
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_padding()
        self.pooling = [pooling] if isinstance(pooling, str) else list(pooling)
        for mode in self.pooling:
            _check_pooling(mode)
        if "pooler" in self.pooling and model.pooler is None:
            raise ValueError(POOLER_NEEDED)
        self.normalize = normalize
        self.prompts = dict(prompts or {})
        if default_prompt_name is not None and default_prompt_name not in self.prompts:
            raise ValueError(
                f"default_prompt_name={default_prompt_name!r} is not one of the prompts {_names(self.prompts)}"
            )
        self.default_prompt_name = default_prompt_name
        # A folder whose pooling leaves the prompt out (include_prompt: false) sets this; see resolve_prompt.
        self.include_prompt = True
        self.truncate_dim = None
        self.truncate_dim = self._check_truncate_dim(truncate_dim)
        self.max_length = max_length
        self.pad_id = self.tokenizer.token_to_id("[PAD]")
        if self.pad_id is None:
            self.pad_id = model.config.pad_token_id or 0
        self.last_stats = EncodeStats()

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = "auto",
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
        **hub_kwargs: Any,
    ) -> Embedder:
        """Load model, tokenizer and sentence-transformers settings from one folder or hub id.

        Explicit arguments win over the folder's metadata, which wins over the defaults.

        Args:
            name_or_path: a local checkpoint folder or a hub id.
            device: where the model runs (e.g. "cpu", "cuda:1"); None: the CPU.
            dtype: "auto" (bfloat16 where this CPU runs it natively and measurably faster, else float32),
                None (float32), a dtype or its name; see bertlite.utils.capabilities.resolve_dtype.
                "int8": as quantize="int8".
            pooling: mode(s) as in __init__; None: the folder's, else "mean".
            normalize: as in __init__; None: the folder's, else False.
            max_length: as in __init__; None: the folder's, else the model's max_position_embeddings.
            unpad: see __init__.
            prompts: added to the folder's prompts (these win on a shared name).
            default_prompt_name: None: the folder's default prompt, if any.
            truncate_dim: see __init__.
            quantize: "int8": load float32, then bertlite.quant.int8.quantize_int8; None: no quantization.
            allow_nonfinite: load weights holding NaN or Inf (with a warning), as
                BertModel.from_pretrained's.
            pack_weights: see __init__.
            **hub_kwargs: hub options (revision, cache_dir, token, local_files_only, ...; see
                bertlite.checkpoint.hub.resolve_file), used for every file of the checkpoint.

        Returns:
            The Embedder.

        Raises:
            ValueError: a device this machine cannot use, an unknown dtype or quantize, or an argument
                __init__ refuses.
        """
        int8 = check_quantize(quantize, dtype)
        device = check_device(device)
        settings = read_sentence_transformers_settings(name_or_path, **hub_kwargs)
        saved_prompts, saved_default = read_sentence_transformers_prompts(name_or_path, **hub_kwargs)
        sizes = None
        if dtype == "auto" and not int8 and (device is None or device.type == "cpu"):
            config = BertConfig.from_pretrained(name_or_path, **hub_kwargs)  # "auto" times the model's own sizes
            sizes = (config.hidden_size, config.intermediate_size)
        dtype = resolve_dtype(None if int8 else dtype, device, sizes)
        if normalize is None:
            normalize = settings.normalize if settings.normalize is not None else DEFAULT_NORMALIZE
        pooling = pooling or settings.pooling or DEFAULT_POOLING
        modes = [pooling] if isinstance(pooling, str) else list(pooling)
        # The pooler is loaded only when a pooling mode uses it: many sentence-embedding
        # checkpoints ship without one, and then it would be a missing key.
        model = BertModel.from_pretrained(
            name_or_path,
            dtype=dtype,
            device=device,
            add_pooling_layer="pooler" in modes,
            allow_nonfinite=allow_nonfinite,
            **hub_kwargs,
        )
        tokenizer = load_tokenizer(name_or_path, **hub_kwargs)
        if int8:
            quantize_int8(model, tokenizer)
        embedder = cls(
            model,
            tokenizer,
            pooling=modes,
            normalize=normalize,
            max_length=max_length if max_length is not None else settings.max_length,
            unpad=unpad,
            prompts={**saved_prompts, **(prompts or {})},
            default_prompt_name=default_prompt_name if default_prompt_name is not None else saved_default,
            truncate_dim=truncate_dim,
            pack_weights=pack_weights,
        )
        embedder.include_prompt = settings.include_prompt
        return embedder

    @property
    def max_length(self) -> int:
        """Tokens per text; longer texts are truncated (longest segment first) or refused (on_long="error").

        Set it to None for the model's max_position_embeddings; a larger value is clamped to that.
        """
        return self._max_length

    @max_length.setter
    def max_length(self, value: int | None) -> None:
        """None: the model's max_position_embeddings; a larger value is clamped to it."""
        _check_count("max_length", value, none="the model's max_position_embeddings")
        limit = self.model.config.max_position_embeddings
        # Set on this Embedder's own tokenizer here, not per call: encode() may run in several threads at once.
        self._max_length = limit if value is None else min(value, limit)
        self.tokenizer.enable_truncation(self._max_length, strategy="longest_first")
        self._cutter = TextCutter(self.tokenizer, self._max_length)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model runs in (what dtype="auto" resolved to)."""
        return self.model.dtype

    @property
    def precision(self) -> str:
        """What the Linear layers compute in, by name: "int8" for a quantized model, else the dtype's name."""
        return "int8" if is_quantized(self.model) else str(self.dtype).removeprefix("torch.")

    @property
    def dimension(self) -> int:
        """Length of the vectors encode() returns (truncate_dim when set)."""
        return self.truncate_dim or self.model.config.hidden_size * len(self.pooling)

    def _check_truncate_dim(self, truncate_dim: int | None) -> int | None:
        if truncate_dim is not None and not 1 <= truncate_dim <= self.dimension:
            raise ValueError(f"truncate_dim={truncate_dim} must be between 1 and the dimension {self.dimension}")
        return truncate_dim

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """Pick the text put before every input.

        Args:
            prompt: the text itself; wins when given.
            prompt_name: a key of `prompts`; None: the default prompt, if any.

        Returns:
            prompt, else prompts[prompt_name], else the default prompt, else "".

        Raises:
            ValueError: both arguments given, an unknown prompt_name, or a non-empty prompt for a
                model whose pooling leaves the prompt out (include_prompt: false).
        """
        if prompt is not None and prompt_name is not None:
            raise ValueError("give prompt or prompt_name, not both")
        if prompt is None:
            name = prompt_name if prompt_name is not None else self.default_prompt_name
            if name is not None and name not in self.prompts:
                raise ValueError(f"prompt_name={name!r} is not one of the prompts {_names(self.prompts)}")
            prompt = "" if name is None else self.prompts[name]
        if prompt and not self.include_prompt:
            raise ValueError(
                f"prompt {prompt!r}: this model's pooling leaves the prompt's tokens out (include_prompt: false), "
                "which bertlite does not implement; its vectors would differ from sentence-transformers'"
            )
        return prompt

    def tokenize(self, texts: Sequence[Text], on_long: str = "truncate", first_index: int = 0) -> list[Encoding]:
        """Tokenize texts, truncated to max_length (longest segment first, as transformers does).

        No prompt is added here: pass the texts with it (resolve_prompt()).

        Args:
            texts: strings, or (text_a, text_b) pairs.
            on_long: "truncate" (default) or "error": a ValueError for a text longer than max_length.
            first_index: index of texts[0] in the caller's input, for error messages.

        Returns:
            One tokenizers.Encoding per text, unpadded, in input order.

        Raises:
            ValueError: a text that is not a str or a pair of str, or holds a lone surrogate; a text
                too long under on_long="error"; an unknown on_long.
        """
        texts = list(texts)
        for i, text in enumerate(texts):
            _check_text(text, first_index + i)
        # A long text is read only as far as max_length needs (the same ids), so memory stays bounded.
        encodings = self.tokenizer.encode_batch([self._cut(text) for text in texts])
        if on_long == "error":
            for i, e in enumerate(encodings):
                if e.overflowing:
                    raise ValueError(
                        f"text {first_index + i} (0-based) is longer than max_length={self.max_length} tokens; "
                        "truncate it (on_long='truncate', CLI --on-long truncate) or raise the max length "
                        "(max_length=, CLI --max-length)"
                    )
        elif on_long != "truncate":
            raise ValueError(f"on_long={on_long!r} must be 'truncate' or 'error'")
        return encodings

    def count_tokens(self, text: str) -> int:
        """The tokens of a whole text, [CLS] and [SEP] included, without truncation; read a piece at a
        time, so a long text costs no more memory than max_length tokens do.

        Args:
            text: the text (prompt included, if any).

        Returns:
            The token count.
        """
        return self._cutter.count(text) + self.tokenizer.num_special_tokens_to_add(False)

    def _cut(self, text: Text) -> Text:
        """`text` shortened to what truncation keeps plus a margin, with the same ids (TextCutter)."""
        if isinstance(text, str):
            return self._cutter.cut(text)
        first, second = self._cutter.cut_pair(*text)
        return text if first is text[0] and second is text[1] else (first, second)

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
    ) -> np.ndarray | Tensor:
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
            on_long: "truncate" (default) or "error", as in tokenize().
            prompt_name: see resolve_prompt().
            prompt: see resolve_prompt(); the prompt goes before each text (before the first text
                of a pair).
            truncate_dim: for this call, as in __init__; None: the Embedder's.

        Returns:
            float32 vectors (n, dimension): a numpy array, or a tensor with convert_to="torch".

        Raises:
            ValueError: a text tokenize() refuses, a bad batch_size, max_tokens, on_long,
                truncate_dim or prompt (see resolve_prompt()).
            TypeError: `texts` is a single string.
        """
        if convert_to not in ("numpy", "torch"):
            raise ValueError(f"convert_to={convert_to!r} must be 'numpy' or 'torch'")
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
    ) -> Iterator[tuple[int, Tensor]]:
        """Embed texts chunk by chunk in input order, so a caller can write a large input out as it goes.

        Args:
            texts: any iterable of strings or (text_a, text_b) pairs, an endless one too: it is read
                CHUNK_TEXTS at a time, so memory does not grow with its length.
            batch_size, show_progress_bar, max_tokens, on_long, prompt_name, prompt, truncate_dim:
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
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts; wrap a single string in a list")
        prefix = self.resolve_prompt(prompt, prompt_name)
        dimension = self._check_truncate_dim(truncate_dim) or self.dimension
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        if on_long not in ("truncate", "error"):
            raise ValueError(f"on_long={on_long!r} must be 'truncate' or 'error'")
        if total is None and isinstance(texts, Sized):
            total = first_row + len(texts)
        stats = self.last_stats = EncodeStats()
        progress = _progress(total, show_progress_bar, initial=first_row)
        rows, start = iter(texts), first_row
        try:
            while chunk := list(itertools.islice(rows, CHUNK_TEXTS)):
                encodings = self.tokenize(_with_prompt(chunk, prefix), on_long, first_index=start)
                stats.texts += len(chunk)
                vectors = torch.empty(len(encodings), self.dimension, dtype=torch.float32)
                rest = max(total - start - len(chunk), 0) if total is not None else 0
                batches = self._embed_sorted(encodings, batch_size, max_tokens, stats, texts_after=rest)
                for batch_rows, batch_vectors in batches:
                    vectors[batch_rows] = batch_vectors
                    progress.update(len(batch_rows))
                yield start, vectors[:, :dimension].contiguous()
                start += len(chunk)
        finally:
            progress.close()

    def encode_tokenized(
        self, encodings: Sequence[Encoding], batch_size: int | None = None, *, max_tokens: int | None = None
    ) -> np.ndarray:
        """encode() for texts that tokenize() has already turned into encodings (prompt included).

        For a caller that needs the token counts before the forward (bertlite serve's handlers), so
        each text is tokenized once.

        Args:
            encodings: tokenize()'s output.
            batch_size, max_tokens: as in encode().

        Returns:
            float32 vectors (n, dimension) as a numpy array, in input order, batched as encode() batches.
        """
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        stats = self.last_stats = EncodeStats(texts=len(encodings))
        vectors = torch.empty(len(encodings), self.dimension, dtype=torch.float32)
        for rows, batch_vectors in self._embed_sorted(list(encodings), batch_size, max_tokens, stats):
            vectors[rows] = batch_vectors
        return vectors.numpy()

    def _batch_limits(self, batch_size: int | None, max_tokens: int | None) -> tuple[int, int | None]:
        """encode()'s batch_size and max_tokens, checked, with the defaults filled in."""
        _check_count("batch_size", batch_size)
        _check_count("max_tokens", max_tokens)
        if batch_size is None and max_tokens is None:
            return (MAX_BATCH_SIZE, DEFAULT_MAX_TOKENS) if self.unpad else (DEFAULT_BATCH_SIZE, None)
        return batch_size or MAX_BATCH_SIZE, max_tokens

    def _embed_sorted(
        self,
        encodings: list[Encoding],
        batch_size: int,
        max_tokens: int | None,
        stats: EncodeStats,
        texts_after: int = 0,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Batches of `encodings` by length; texts_after: how many more texts the same job brings."""
        lengths = [len(e.ids) for e in encodings]
        tokens = sum(lengths)
        stats.tokens += tokens
        # a long int8 job builds its compiled quantization first; the rest of it counted at this rate
        count_int8_tokens(self.model, tokens, texts_after * tokens // max(len(encodings), 1))
        stats.truncated += sum(bool(e.overflowing) for e in encodings)
        order = sorted(range(len(encodings)), key=lengths.__getitem__, reverse=True)
        device = self.model.device
        embed = self._embed_packed if self.unpad else self._embed_padded
        for rows in _batches(order, lengths, batch_size, max_tokens):
            batch = [encodings[i] for i in rows]
            stats.padded_tokens += len(batch) * len(batch[0].ids)
            yield torch.tensor(rows), embed(batch, device).cpu()

    @torch.inference_mode()
    def _embed_packed(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        lengths = [len(e.ids) for e in encodings]
        # Filler sequences of [PAD] bring the token count up to a few shapes (see shape_tokens), dropped after.
        total = sum(lengths)
        filler = shape_tokens(total) - total
        widest = max(lengths)
        fill = [widest] * (filler // widest) + ([filler % widest] if filler % widest else [])
        ids = torch.tensor([i for e in encodings for i in e.ids] + [self.pad_id] * filler, device=device)
        types = torch.tensor([t for e in encodings for t in e.type_ids] + [0] * filler, device=device)
        layout = PackedLayout.from_lengths(torch.tensor(lengths + fill, device=device), self.model.dtype)
        out = self.model(input_ids=ids, token_type_ids=types, layout=layout, return_dict=True)
        hidden, pooled = out.last_hidden_state, out.pooler_output
        vectors = self._finish([pool_packed(hidden, layout, mode, pooled) for mode in self.pooling])
        return vectors[: len(encodings)]

    @torch.inference_mode()
    def _embed_padded(self, encodings: list[Encoding], device: torch.device) -> Tensor:
        batch = self._collate(encodings, device)
        out = self.model(**batch, return_dict=True)
        mask = batch["attention_mask"]
        return self._finish([pool(out.last_hidden_state, mask, mode, out.pooler_output) for mode in self.pooling])

    def _finish(self, vectors: list[Tensor]) -> Tensor:
        pooled = vectors[0] if len(vectors) == 1 else torch.cat(vectors, dim=-1)
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1) if self.normalize else pooled
        # sentence-transformers truncates after its Normalize module and does not re-normalize.
        return pooled[:, : self.dimension].contiguous()

    def _collate(self, encodings: list[Encoding], device: torch.device) -> dict[str, Tensor]:
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
        }


def shape_tokens(tokens: int) -> int:
    """The token count a packed forward of `tokens` tokens runs at: a multiple of 8 up to 64, then one of
    8 steps per doubling (at most 1/8 more).

    oneDNN (the Linear layers' GEMMs) builds and caches kernels for every row count it meets, about
    2.4 MB each for MiniLM-L6: a server's batches, each of a new total, grew its memory without end.
    On this grid there are 8 shapes per doubling, so the caches, and the process, level off.

    Args:
        tokens: the batch's real tokens.

    Returns:
        The padded count, >= tokens.
    """
    step = 8 if tokens <= 64 else 1 << (tokens.bit_length() - 4)
    return -(-tokens // step) * step


def check_device(device: torch.device | str | None) -> torch.device | None:
    """Check that this machine can use a device.

    Args:
        device: a torch.device or its name; None passes through.

    Returns:
        `device` as a torch.device, or None.

    Raises:
        ValueError: `device` is not a torch device, or this machine cannot use it.
    """
    if device is None:
        return None
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)") from e
    try:
        torch.empty(0, device=resolved)
    except (AssertionError, RuntimeError, NotImplementedError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if len(reason) > 100:
            reason = f"this torch build has no {resolved.type} backend"
        raise ValueError(f"device={device!r} is not available on this machine ({reason}); use cpu") from e
    return resolved


def _check_count(name: str, value: object, none: str = "the default") -> None:
    """A count option: None (meaning `none`) or an int >= 1; never a float or a bool."""
    if value is None:
        return
    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None or number < 1:
        raise ValueError(f"{name} must be an integer >= 1 (or None for {none}), got {value!r}")


def _check_text(text: object, index: int) -> None:
    pair = isinstance(text, tuple | list) and len(text) == 2 and all(isinstance(p, str) for p in text)
    if not (isinstance(text, str) or pair):
        raise ValueError(
            f"texts[{index}] is {type(text).__name__} {_preview(text)}; each text must be a str "
            "or a (text_a, text_b) pair of str"
        )
    for part in text if pair else (text,):
        if surrogate := SURROGATE.search(part):
            raise ValueError(
                f"texts[{index}] holds a lone surrogate (\\u{ord(surrogate.group()):04x}), which is not Unicode "
                "text; replace it (e.g. with U+FFFD)"
            )


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _with_prompt(texts: Sequence[Text], prompt: str) -> Sequence[Text]:
    if not prompt:
        return texts
    # Items that are not texts pass unchanged, for tokenize() to name them.
    return [prompt + t if isinstance(t, str) else (prompt + t[0], *t[1:]) if _is_pair(t) else t for t in texts]


def _is_pair(text: object) -> bool:
    return isinstance(text, tuple | list) and len(text) == 2 and isinstance(text[0], str)


def _names(prompts: dict[str, str]) -> str:
    return "(" + ", ".join(sorted(prompts)) + ")" if prompts else "(none)"


def _batches(order: list[int], lengths: list[int], batch_size: int, max_tokens: int | None) -> Iterator[list[int]]:
    """Consecutive runs of `order` (longest first) within batch_size and the token budget."""
    batch: list[int] = []
    for i in order:
        # The first text of a batch is its longest, so it sets the padded width.
        width = lengths[batch[0]] if batch else lengths[i]
        if batch and (len(batch) == batch_size or (max_tokens and (len(batch) + 1) * width > max_tokens)):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def _progress(total: int, show: bool | None, initial: int = 0) -> Any:
    from tqdm import tqdm

    disable = not (sys.stderr.isatty() if show is None else show)
    return tqdm(total=total, initial=initial, unit="text", disable=disable, file=sys.stderr, dynamic_ncols=True)
