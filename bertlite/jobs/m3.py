"""BGE-M3: a dense vector, lexical (sparse) weights and ColBERT vectors of each text from one forward. `M3Encoder`.

The outputs are those FlagEmbedding's BGEM3FlagModel gives for the same folder (an XLM-RoBERTa checkpoint
with `sparse_linear.pt` and `colbert_linear.pt` beside it): the dense vector is the first token's row,
normalized; a lexical weight is relu(sparse_linear(row)) of a token, the largest per distinct token id, the
special tokens (<s>, </s>, <pad>, <unk>) and zero weights left out; the ColBERT vectors are
colbert_linear(row) of every token but the first, normalized. All three come from the same hidden states.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor, nn

from bertlite.checkpoint.load import iter_tensors
from bertlite.errors import CheckpointError
from bertlite.hub import resolve_file
from bertlite.jobs import bars
from bertlite.jobs.base import BaseEncoder, EncodeStats, check_count, on_whole_blocks, progress_bar, with_prompt
from bertlite.jobs.inputs import check_texts
from bertlite.jobs.long_texts import TextCutter
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.st.folders import M3_FILES
from bertlite.models.bert import BertModel

__all__ = ["M3Encoder", "colbert_score", "lexical_matching_score"]

# The heads' files beside the checkpoint, as FlagEmbedding saves them.
COLBERT_FILE, SPARSE_FILE = M3_FILES
# The special tokens whose lexical weights BGE-M3 drops: the cls, eos, pad and unk tokens of XLM-RoBERTa's
# vocabulary, or of BERT's (which has no eos: [SEP] keeps its weight, as in FlagEmbedding).
UNUSED_TOKENS = ("<s>", "</s>", "<pad>", "<unk>", "[CLS]", "[PAD]", "[UNK]")
OUTPUTS = ("dense_vecs", "lexical_weights", "colbert_vecs")
# Tokens per text unless told otherwise: BGEM3FlagModel's passage_max_length and query_max_length.
DEFAULT_MAX_LENGTH = 512


class M3Encoder(BaseEncoder):
    """A BGE-M3 model: texts in; dense vectors, lexical weights and ColBERT vectors out, from one forward."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        colbert_linear: nn.Linear,
        sparse_linear: nn.Linear,
        *,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        normalize_embeddings: bool = True,
        query_instruction_for_retrieval: str | None = None,
        unpad: bool = True,
        pack_weights: bool = True,
    ) -> None:
        """Wrap a loaded base model, its tokenizer and the two heads.

        Args:
            model: the XLM-RoBERTa (or other family) base model.
            tokenizer: its tokenizer (a copy is kept).
            colbert_linear: hidden -> ColBERT dimension.
            sparse_linear: hidden -> 1, a token's lexical weight before relu.
            max_length: tokens per text unless a call says otherwise (FlagEmbedding's default, 512, clamped to
                the model's maximum); None: the model's maximum (8,192 for BGE-M3).
            normalize_embeddings: dense and ColBERT vectors of length 1 (BGE-M3's default).
            query_instruction_for_retrieval: text put before queries by encode_queries; None: none.
            unpad, pack_weights: as in BaseEncoder.

        Raises:
            ValueError: a head whose input size is not the model's hidden size, or a sparse head of more
                than one output.
        """
        super().__init__(model, tokenizer, max_length=max_length, unpad=unpad, pack_weights=pack_weights)
        hidden = self.bert.config.hidden_size
        for name, head in (("colbert_linear", colbert_linear), ("sparse_linear", sparse_linear)):
            if head.in_features != hidden:
                raise ValueError(f"{name} takes {head.in_features} features, the model's hidden size is {hidden}")
        if sparse_linear.out_features != 1:
            raise ValueError(f"sparse_linear must give 1 weight per token, it gives {sparse_linear.out_features}")
        # The heads run in float32 on float32 rows, as FlagEmbedding runs them on a CPU.
        self.colbert_linear = colbert_linear.float().to(self.device).eval()
        self.sparse_linear = sparse_linear.float().to(self.device).eval()
        self.normalize_embeddings = normalize_embeddings
        self.query_instruction_for_retrieval = query_instruction_for_retrieval
        ids = (self.backend_tokenizer.token_to_id(token) for token in UNUSED_TOKENS)
        self.unused_ids = torch.tensor(sorted({i for i in ids if i is not None}), dtype=torch.long)
        self._length_tokenizers: dict[int, tuple[Tokenizer, TextCutter]] = {}
        self._set_prompts(None, None)  # the server's prompt fields resolve to none
        self.settle_auto()

    def _bar_outputs(self) -> tuple[Any, ...]:
        encodings = self._encode_texts(bars.CALIBRATION_TEXTS)
        return tuple(self.encode_tokenized(encodings, output_value=name) for name in (None, "sparse", "colbert_vecs"))

    def _bar(self, reference: tuple[Any, ...], fast: tuple[Any, ...], mode: str, margin: float = 1.0) -> bars.Measured:
        held = (
            bars.embeddings(reference[0], fast[0], mode, margin),
            bars.sparse(reference[1], fast[1], mode, margin),
            bars.maxsim(reference[2], fast[2], mode, margin),
        )
        return bars.Measured(all(m.passed for m in held), "; ".join(m.summary for m in held))

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        quantize: str | None = None,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        normalize_embeddings: bool = True,
        query_instruction_for_retrieval: str | None = None,
        unpad: bool = True,
        allow_nonfinite: bool = False,
        pack_weights: bool = True,
        **hub_kwargs: Any,
    ) -> M3Encoder:
        """Load a BGE-M3 folder or hub id: the base model, its tokenizer, colbert_linear.pt and sparse_linear.pt.

        Args:
            name_or_path: a local folder or a hub id (BAAI/bge-m3).
            device, dtype, quantize, unpad, allow_nonfinite, pack_weights: as Embedder.from_pretrained's;
                the heads stay float32.
            max_length, normalize_embeddings, query_instruction_for_retrieval: see __init__.
            **hub_kwargs: hub options (revision, cache_dir, token, local_files_only, ...).

        Returns:
            The M3Encoder.

        Raises:
            CheckpointError: a head file missing, unreadable, not a Linear's weights, or holding NaN or Inf.
            ValueError: as Embedder.from_pretrained.
        """
        options = LoadOptions.check(quantize, dtype, device, allow_nonfinite, hub_kwargs)
        model, tokenizer = options.load(BertModel.from_pretrained, name_or_path, add_pooling_layer=False)
        heads = [
            _load_linear(name_or_path, file, allow_nonfinite, options.hub_kwargs)
            for file in (COLBERT_FILE, SPARSE_FILE)
        ]
        return cls(
            model,
            tokenizer,
            *heads,
            max_length=max_length,
            normalize_embeddings=normalize_embeddings,
            query_instruction_for_retrieval=query_instruction_for_retrieval,
            unpad=unpad,
            pack_weights=pack_weights,
        )

    @property
    def dimension(self) -> int:
        """Length of a dense vector (the model's hidden size)."""
        return self.bert.config.hidden_size

    def _moved(self, *args: Any, **kwargs: Any) -> None:
        device, _, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:  # the heads stay float32 on the model's device
            self.colbert_linear.to(device)
            self.sparse_linear.to(device)

    # --- FlagEmbedding's API ---------------------------------------------------------------

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int | None = None,
        max_length: int | None = None,
        return_dense: bool = True,
        return_sparse: bool = False,
        return_colbert_vecs: bool = False,
        *,
        max_tokens: int | None = None,
        show_progress_bar: bool | None = None,
        on_long: str = "truncate",
    ) -> dict[str, Any]:
        """The chosen outputs of texts, in input order, from one forward per batch, as BGEM3FlagModel.encode.

        Args:
            sentences: a text or a list of texts.
            batch_size: caps texts per batch; None with max_tokens None: a token budget (packed) or 32 texts.
            max_length: tokens per text for this call; None: the encoder's max_length.
            return_dense, return_sparse, return_colbert_vecs: which outputs to compute (one at least).
            max_tokens: also caps batch size x longest text.
            show_progress_bar: a tqdm bar on stderr; None: when stderr is a terminal.
            on_long: "truncate" (default) or "error", as in encodings().

        Returns:
            {"dense_vecs": (n, H) float32 array, "lexical_weights": per text a dict {token id as str: weight},
            "colbert_vecs": per text a (tokens - 1, dim) float32 array}; an output not asked for is None; for
            a single text, its own dense vector, dict and array.

        Raises:
            ValueError: no output asked for; a text encodings() refuses; a bad batch_size, max_tokens or
                max_length.
        """
        check_texts("sentences", sentences)
        check_count("batch_size", batch_size)
        wanted = (return_dense, return_sparse, return_colbert_vecs)
        if not any(wanted):
            raise ValueError("choose one output at least: return_dense, return_sparse or return_colbert_vecs")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        encodings = self._tokenize_at(texts, max_length, on_long)
        progress = progress_bar(len(texts), show_progress_bar)
        try:
            results = self._outputs_of(encodings, batch_size, max_tokens, wanted, progress.update)
        finally:
            progress.close()
        out: dict[str, Any] = dict.fromkeys(OUTPUTS)
        for k, (name, asked) in enumerate(zip(OUTPUTS, wanted, strict=True)):
            if asked:
                values = [r[k] for r in results]
                if name == "dense_vecs":
                    values = np.stack(values) if values else np.zeros((0, self.dimension), np.float32)
                out[name] = values[0] if single else values
        return out

    def encode_tokenized(
        self,
        encodings: Sequence[Encoding],
        batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
        output_value: str | None = None,
    ) -> np.ndarray | list:
        """One output of texts encodings() has already tokenized, in the forms the other jobs give (a server's
        and the CLI's step).

        Args:
            encodings: encodings()'s output.
            batch_size, max_tokens: the batch limits, as in encode().
            output_value: None or "dense_vecs": the (n, H) float32 dense vectors; "sparse": per text the
                (indices, values) of its lexical weights as a vocabulary-sized sparse vector (int64 token ids
                ascending, float32 weights), as SparseEncoder.encode_tokenized gives them; "colbert_vecs":
                per text a (tokens - 1, dim) float32 array.

        Returns:
            The chosen output, one item per encoding, in input order.

        Raises:
            ValueError: an unknown output_value.
        """
        names = {None: 0, "dense_vecs": 0, "sparse": 1, "colbert_vecs": 2}
        if output_value not in names:
            raise ValueError(f"output_value={output_value!r} must be None, 'dense_vecs', 'sparse' or 'colbert_vecs'")
        k = names[output_value]
        outputs = self._outputs_of(list(encodings), batch_size, max_tokens, tuple(i == k for i in range(3)))
        out = [output[k] for output in outputs]
        if k == 0:
            return np.stack(out) if out else np.zeros((0, self.dimension), np.float32)
        if k == 1:
            return [_sparse_row(weights) for weights in out]
        return out

    def encode_queries(self, queries: str | Sequence[str], **kwargs: Any) -> dict[str, Any]:
        """encode() of queries, each after query_instruction_for_retrieval when set.

        Args:
            queries: a query or a list of them.
            **kwargs: as encode()'s.

        Returns:
            As encode().
        """
        check_texts("queries", queries)
        prefix = self.query_instruction_for_retrieval or ""
        if isinstance(queries, str):
            return self.encode(prefix + queries, **kwargs)
        return self.encode(list(with_prompt(list(queries), prefix)), **kwargs)

    def encode_corpus(self, corpus: str | Sequence[str], **kwargs: Any) -> dict[str, Any]:
        """encode() of passages (no instruction).

        Args:
            corpus: a passage or a list of them.
            **kwargs: as encode()'s.

        Returns:
            As encode().
        """
        check_texts("corpus", corpus)
        return self.encode(corpus, **kwargs)

    def convert_id_to_token(self, lexical_weights: dict | list[dict]) -> dict | list[dict]:
        """Lexical weights keyed by token text instead of token id, as BGEM3FlagModel.convert_id_to_token.

        Args:
            lexical_weights: one dict of encode()'s lexical_weights, or a list of them.

        Returns:
            The same weights keyed by each id's decoded text; one dict for one dict.

        Raises:
            ValueError: a key that is not a token id of the vocabulary, named with its dict's index.
        """
        items = [lexical_weights] if isinstance(lexical_weights, dict) else lexical_weights
        converted = [
            {self.backend_tokenizer.decode([self._token_id(i, k)]): w for i, w in item.items()}
            for k, item in enumerate(items)
        ]
        return converted[0] if len(converted) == 1 else converted

    def _token_id(self, key: Any, row: int) -> int:
        """A lexical-weights key (an id, or its str as encode() gives it) as a token id of the vocabulary."""
        vocab_size = self.backend_tokenizer.get_vocab_size()
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"lexical_weights[{row}]: key {key!r} is not a token id") from None
        if not 0 <= token_id < vocab_size:
            message = f"token id {token_id} is not below the vocabulary size {vocab_size}"
            raise ValueError(f"lexical_weights[{row}]: {message}")
        return token_id

    def compute_lexical_matching_score(
        self, lexical_weights_1: dict | list[dict], lexical_weights_2: dict | list[dict]
    ) -> float | np.ndarray:
        """lexical_matching_score(): the sum over shared tokens of the two weights' product."""
        return lexical_matching_score(lexical_weights_1, lexical_weights_2)

    def colbert_score(self, q_reps: np.ndarray | Tensor, p_reps: np.ndarray | Tensor) -> Tensor:
        """colbert_score(): MaxSim of one query's vectors over one passage's, averaged over the query's."""
        return colbert_score(q_reps, p_reps)

    def compute_score(
        self,
        sentence_pairs: Sequence[tuple[str, str]] | tuple[str, str],
        batch_size: int | None = None,
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
        weights_for_different_modes: Sequence[float] | None = None,
    ) -> dict[str, list[float]] | dict[str, float] | list:
        """Each (query, passage) pair's scores in the three modes and two weighted sums, as
        BGEM3FlagModel.compute_score: "dense" (the dense vectors' dot product), "sparse"
        (compute_lexical_matching_score), "colbert" (colbert_score), "sparse+dense" and "colbert+sparse+dense" (the
        modes' weighted means). Queries are taken as they are (no query instruction), as there. Each pair is scored
        on its own; FlagEmbedding's padded batches can lift a query token's best ColBERT score below 0 to 0.

        Args:
            sentence_pairs: (query, passage) pairs, or one pair.
            batch_size: as encode()'s.
            max_query_length, max_passage_length: tokens per query and per passage; None: the encoder's max_length.
            weights_for_different_modes: the weights of dense, sparse and colbert in the sums; None: [1, 1, 1].

        Returns:
            {mode: a score per pair}; for one pair {mode: its score}; [] for no pairs.

        Raises:
            ValueError: weights_for_different_modes not three numbers, or what encode() refuses.
        """
        if isinstance(sentence_pairs, list) and not sentence_pairs:
            return []
        weights = [1.0, 1.0, 1.0] if weights_for_different_modes is None else list(weights_for_different_modes)
        if len(weights) != 3:
            raise ValueError(f"weights_for_different_modes must be 3 weights (dense, sparse, colbert), got {weights}")
        single = isinstance(sentence_pairs[0], str)
        pairs = [sentence_pairs] if single else list(sentence_pairs)
        outputs = {"batch_size": batch_size, "return_dense": True, "return_sparse": True, "return_colbert_vecs": True}
        queries = self.encode([pair[0] for pair in pairs], max_length=max_query_length, **outputs)
        passages = self.encode([pair[1] for pair in pairs], max_length=max_passage_length, **outputs)
        dense = (queries["dense_vecs"] * passages["dense_vecs"]).sum(axis=1).astype(np.float64)
        sparse = np.array(
            [
                lexical_matching_score(q, p)
                for q, p in zip(queries["lexical_weights"], passages["lexical_weights"], strict=True)
            ],
            dtype=np.float64,
        )
        colbert = np.array(
            [colbert_score(q, p).item() for q, p in zip(queries["colbert_vecs"], passages["colbert_vecs"], strict=True)]
        )
        w_dense, w_sparse, w_colbert = weights
        scores = {
            "colbert": colbert.tolist(),
            "sparse": sparse.tolist(),
            "dense": dense.tolist(),
            "sparse+dense": ((sparse * w_sparse + dense * w_dense) / (w_sparse + w_dense)).tolist(),
            "colbert+sparse+dense": (
                (colbert * w_colbert + sparse * w_sparse + dense * w_dense) / sum(weights)
            ).tolist(),
        }
        return {mode: values[0] for mode, values in scores.items()} if single else scores

    # --- the computation ------------------------------------------------------------------

    def _outputs_of(
        self,
        encodings: list[Encoding],
        batch_size: int | None,
        max_tokens: int | None,
        wanted: tuple[bool, ...],
        on_batch: Callable[[int], Any] | None = None,
    ) -> list[tuple]:
        """Per encoding, in input order, (dense, lexical weights, ColBERT vectors), each None unless wanted.

        Args:
            encodings: the texts, tokenized.
            batch_size, max_tokens: the batch limits (see BaseEncoder._batch_limits).
            wanted: (dense, sparse, colbert).
            on_batch: called with each batch's text count (a progress bar's update).
        """
        batch_size, max_tokens = self._batch_limits(batch_size, max_tokens)
        stats = self.last_stats = EncodeStats(texts=len(encodings))
        run = self._run_packed if self.unpad else self._run_padded
        results: list[Any] = [None] * len(encodings)
        for rows, outputs in self._run_sorted(encodings, batch_size, max_tokens, stats, lambda b, d: run(b, d, wanted)):
            for row, output in zip(rows, outputs, strict=True):
                results[row] = output
            if on_batch is not None:
                on_batch(len(rows))
        return results

    def _tokenize_at(self, texts: list[str], max_length: int | None, on_long: str) -> list[Encoding]:
        """encodings() at max_length tokens: a tokenizer per length, kept (the encoder's own keeps its setting)."""
        if max_length is None or max_length == self.max_length:
            return self.encodings(texts, on_long)
        check_count("max_length", max_length)
        length = min(max_length, self.bert.config.max_sequence_length)
        if length not in self._length_tokenizers:
            tokenizer = Tokenizer.from_str(self.backend_tokenizer.to_str())
            tokenizer.enable_truncation(length, strategy="longest_first")
            self._length_tokenizers[length] = (tokenizer, TextCutter(tokenizer, length))
        return self._tokenize_with(*self._length_tokenizers[length], texts, on_long)

    @torch.inference_mode()
    def _run_packed(self, encodings: list[Encoding], device: torch.device, wanted: tuple[bool, ...]) -> list:
        out, _ = self.forward_packed(encodings, device)
        lengths = [len(e.ids) for e in encodings]
        return self._outputs(out.last_hidden_state[: sum(lengths)], encodings, wanted)

    @torch.inference_mode()
    def _run_padded(self, encodings: list[Encoding], device: torch.device, wanted: tuple[bool, ...]) -> list:
        out, mask = self.forward_padded(encodings, device)
        return self._outputs(out.last_hidden_state[mask.bool()], encodings, wanted)

    def _outputs(self, hidden: Tensor, encodings: list[Encoding], wanted: tuple[bool, ...]) -> list[tuple]:
        """Per text (dense, lexical weights, ColBERT vectors), each None unless wanted, from its token rows.

        Args:
            hidden: (sum(lengths), H) the real tokens' last hidden states, text after text.
            encodings: the batch's texts.
            wanted: (dense, sparse, colbert).
        """
        hidden = hidden.float()
        lengths = torch.tensor([len(e.ids) for e in encodings])
        starts = torch.cumsum(lengths, 0) - lengths
        dense = sparse = colbert = None
        if wanted[0]:
            dense = hidden[starts.to(hidden.device)]
            dense = nn.functional.normalize(dense, dim=-1) if self.normalize_embeddings else dense
            dense = dense.cpu().numpy()
        if wanted[1]:
            # Both heads run on whole row blocks, so a text's weights and vectors do not depend on its batch.
            weights = torch.relu(on_whole_blocks(self.sparse_linear, hidden)).squeeze(-1).cpu().split(lengths.tolist())
            sparse = [self._lexical_weights(w, e.ids) for w, e in zip(weights, encodings, strict=True)]
        if wanted[2]:
            rest = torch.ones(len(hidden), dtype=torch.bool)
            rest[starts] = False  # every token but each text's first
            vectors = on_whole_blocks(self.colbert_linear, hidden[rest.to(hidden.device)])
            vectors = nn.functional.normalize(vectors, dim=-1) if self.normalize_embeddings else vectors
            colbert = [v.numpy() for v in vectors.cpu().split((lengths - 1).tolist())]
        return [
            (
                None if dense is None else dense[i],
                None if sparse is None else sparse[i],
                None if colbert is None else colbert[i],
            )
            for i in range(len(encodings))
        ]

    def _lexical_weights(self, weights: Tensor, ids: list[int]) -> dict[str, float]:
        """{token id as str: its largest weight} over a text's tokens, special tokens and zeros left out,
        in the order the ids first appear."""
        ids_t = torch.tensor(ids, dtype=torch.long)
        keep = (weights > 0) & ~torch.isin(ids_t, self.unused_ids)
        result: dict[str, float] = {}
        for token_id, weight in zip(ids_t[keep].tolist(), weights[keep].numpy(), strict=True):
            key = str(token_id)
            if weight > result.get(key, 0.0):
                result[key] = weight
        return result


def _sparse_row(weights: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Lexical weights as a sparse vector's (int64 indices ascending, float32 values)."""
    indices = np.array(sorted(int(i) for i in weights), dtype=np.int64)
    values = np.array([weights[str(i)] for i in indices], dtype=np.float32)
    return indices, values


def lexical_matching_score(
    lexical_weights_1: dict[str, float] | list[dict[str, float]],
    lexical_weights_2: dict[str, float] | list[dict[str, float]],
) -> float | np.ndarray:
    """The sum over shared tokens of the two weights' product, as BGEM3FlagModel.compute_lexical_matching_score.

    Args:
        lexical_weights_1, lexical_weights_2: two dicts of encode()'s lexical_weights, or two lists of them.

    Returns:
        A float for two dicts; an (n1, n2) array for two lists.

    Raises:
        ValueError: a dict with a list.
    """
    if isinstance(lexical_weights_1, dict) and isinstance(lexical_weights_2, dict):
        return sum(w * lexical_weights_2[t] for t, w in lexical_weights_1.items() if t in lexical_weights_2)
    if isinstance(lexical_weights_1, list) and isinstance(lexical_weights_2, list):
        return np.array([[lexical_matching_score(a, b) for b in lexical_weights_2] for a in lexical_weights_1])
    raise ValueError("lexical weights must be two dicts or two lists of dicts")


def colbert_score(q_reps: np.ndarray | Tensor, p_reps: np.ndarray | Tensor) -> Tensor:
    """The ColBERT score of one query's vectors and one passage's, as BGEM3FlagModel.colbert_score: each query
    vector's best dot product over the passage's vectors, averaged over the query's vectors.

    Args:
        q_reps: (query tokens, dim) vectors.
        p_reps: (passage tokens, dim) vectors.

    Returns:
        A 0-d float32 tensor.
    """
    q, p = torch.as_tensor(q_reps), torch.as_tensor(p_reps)
    return torch.einsum("in,jn->ij", q, p).max(-1).values.sum() / q.size(0)


def _load_linear(
    name_or_path: str | os.PathLike, filename: str, allow_nonfinite: bool, hub_kwargs: dict[str, Any]
) -> nn.Linear:
    """A head's nn.Linear from its file beside the checkpoint (read weights-only).

    Raises:
        CheckpointError: the file missing, not a Linear's weight and bias, or holding NaN or Inf.
    """
    path = resolve_file(name_or_path, filename, **hub_kwargs)
    if path is None:
        raise CheckpointError(
            f"{name_or_path}: no {filename}, so it is not a BGE-M3 folder; for dense vectors only load it "
            "with bertlite.Embedder"
        )
    state = dict(iter_tensors(path))
    weight, bias = state.get("weight"), state.get("bias")
    if weight is None or weight.ndim != 2 or set(state) - {"weight", "bias"}:
        raise CheckpointError(f"{path}: expected a Linear's weight and bias, got keys {sorted(state)}")
    if bias is None:  # FlagEmbedding's heads are Linears with a bias, and its load refuses a file without one
        raise CheckpointError(f"{path}: no bias beside the weight: BGE-M3's heads have one (FlagEmbedding's too)")
    if tuple(bias.shape) != (weight.shape[0],):
        raise CheckpointError(f"{path}: bias of shape {tuple(bias.shape)} for a weight of {tuple(weight.shape)}")
    if not allow_nonfinite and not all(torch.isfinite(t).all() for t in state.values()):
        raise CheckpointError(f"{path}: holds NaN or Inf (pass allow_nonfinite=True to load it anyway)")
    linear = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(weight.float())
        linear.bias.copy_(bias.float())
    return linear
