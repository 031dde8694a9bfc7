"""The helpers sentence-transformers users import beside the model, as `sentence_transformers.util` has them.

`from bertlite.util import cos_sim, semantic_search` gives sentence-transformers' results (the same
tensors, the same hits in the same order, the same quantized codes) without importing it: the
algorithms are sentence-transformers 6's, ported.
"""

from __future__ import annotations

import heapq
import inspect
import logging
from collections.abc import Callable
from enum import Enum
from itertools import islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from bertlite.jobs.embedder import Embedder

__all__ = [
    "SIMILARITY_FUNCTIONS",
    "SimilarityFunction",
    "community_detection",
    "cos_sim",
    "dot_score",
    "euclidean_sim",
    "manhattan_sim",
    "normalize_embeddings",
    "pairwise_angle_sim",
    "pairwise_cos_sim",
    "pairwise_dot_score",
    "pairwise_euclidean_sim",
    "pairwise_manhattan_sim",
    "paraphrase_mining",
    "paraphrase_mining_embeddings",
    "pytorch_cos_sim",
    "quantize_embeddings",
    "semantic_search",
    "truncate_embeddings",
]

logger = logging.getLogger(__name__)

Embeddings = list | np.ndarray | Tensor
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


# --- conversions ------------------------------------------------------------------


def _as_tensor(a: Embeddings) -> Tensor:
    """A tensor of `a`, viewing numpy memory where it can; a list of vectors is stacked."""
    if isinstance(a, list):
        if a and all(isinstance(x, Tensor) and x.is_sparse for x in a):
            return torch.stack([x.coalesce().to(dtype=torch.float32) for x in a])
        if a and all(isinstance(x, Tensor) for x in a):
            return torch.stack(a)
        a = torch.stack([_view(x) for x in a]) if a and all(isinstance(x, np.ndarray) for x in a) else torch.tensor(a)
    elif isinstance(a, np.ndarray):
        a = _view(a)
    elif not isinstance(a, Tensor):
        a = torch.tensor(a)
    return a.to(dtype=torch.float32) if a.is_sparse else a


def _view(a: np.ndarray) -> Tensor:
    """A numpy array as a tensor without a copy where numpy allows one (a writeable buffer of a torch dtype)."""
    if a.flags.writeable:
        try:
            return torch.from_numpy(a)
        except TypeError:
            pass
    return torch.tensor(a)


def _as_float(a: Embeddings) -> Tensor:
    """_as_tensor, with floats narrower than 32 bits made float32 (a bf16 matmul would round scores into ties)."""
    a = _as_tensor(a)
    if torch.is_floating_point(a) and torch.finfo(a.dtype).bits < 32:
        a = a.to(torch.float32)
    return a


def _as_batch(a: Embeddings) -> Tensor:
    """_as_float, a single vector made a batch of one."""
    a = _as_float(a)
    return a.unsqueeze(0) if a.dim() == 1 else a


def normalize_embeddings(embeddings: Tensor) -> Tensor:
    """Every vector (row) scaled to length 1; a sparse tensor stays sparse.

    Args:
        embeddings: one vector or a (n, dim) matrix, dense or sparse COO.

    Returns:
        The normalized vectors, the input's shape.
    """
    if not embeddings.is_sparse:
        return torch.nn.functional.normalize(embeddings, p=2, dim=-1)
    embeddings = embeddings.coalesce()
    indices, values = embeddings.indices(), embeddings.values()
    if embeddings.dim() == 1:
        return torch.sparse_coo_tensor(indices, torch.nn.functional.normalize(values, p=2, dim=0), embeddings.size())
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()
    norms = values.new_zeros(embeddings.size(0)).index_add_(0, indices[0], values**2)
    norms = torch.sqrt(norms).index_select(0, indices[0])
    nonzero = norms > 0
    normalized = values.clone()
    normalized[nonzero] /= norms[nonzero]
    return torch.sparse_coo_tensor(indices, normalized.to(embeddings.dtype), embeddings.size())


def truncate_embeddings(embeddings: np.ndarray | Tensor, truncate_dim: int | None) -> np.ndarray | Tensor:
    """The first truncate_dim dimensions of every vector (a Matryoshka model's shorter vectors); None: all."""
    return embeddings[..., :truncate_dim]


# --- similarity -------------------------------------------------------------------


def cos_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """Cosine similarity of every vector of `a` with every vector of `b`.

    Args:
        a: (n, dim) or (dim,) vectors: a tensor, a numpy array, or a list of vectors.
        b: (m, dim) or (dim,) vectors.

    Returns:
        (n, m) float tensor, res[i][j] = cos_sim(a[i], b[j]).
    """
    return torch.mm(normalize_embeddings(_as_batch(a)), normalize_embeddings(_as_batch(b)).transpose(0, 1)).to_dense()


def dot_score(a: Embeddings, b: Embeddings) -> Tensor:
    """Dot product of every vector of `a` with every vector of `b`: (n, m), as cos_sim."""
    return torch.mm(_as_batch(a), _as_batch(b).transpose(0, 1)).to_dense()


def euclidean_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """Minus the euclidean distance of every vector of `a` to every vector of `b`: (n, m), as cos_sim."""
    a, b = _dense(_as_batch(a)), _dense(_as_batch(b))
    return -torch.cdist(a, b, p=2.0)


def manhattan_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """Minus the manhattan distance of every vector of `a` to every vector of `b`: (n, m), as cos_sim."""
    a, b = _dense(_as_batch(a)), _dense(_as_batch(b))
    return -torch.cdist(a, b, p=1.0)


def pairwise_cos_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """Cosine similarity of a[i] with b[i]: (n,)."""
    a, b = _as_float(a), _as_float(b)
    if a.is_sparse or b.is_sparse:
        return (normalize_embeddings(a) * normalize_embeddings(b)).sum(dim=-1).to_dense()
    return pairwise_dot_score(normalize_embeddings(a), normalize_embeddings(b))


def pairwise_dot_score(a: Embeddings, b: Embeddings) -> Tensor:
    """Dot product of a[i] with b[i]: (n,)."""
    return (_as_float(a) * _as_float(b)).sum(dim=-1).to_dense()


def pairwise_euclidean_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """Minus the euclidean distance of a[i] to b[i]: (n,)."""
    diff = _dense(_as_float(a)) - _dense(_as_float(b))
    if not diff.is_floating_point():
        return -diff.square().sum(dim=-1).sqrt()
    return -torch.linalg.vector_norm(diff, dim=-1)


def pairwise_manhattan_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """Minus the manhattan distance of a[i] to b[i]: (n,)."""
    return -torch.sum(torch.abs(_dense(_as_float(a)) - _dense(_as_float(b))), dim=-1)


def pytorch_cos_sim(a: Embeddings, b: Embeddings) -> Tensor:
    """cos_sim under sentence-transformers' older name."""
    return cos_sim(a, b)


def pairwise_angle_sim(x: Embeddings, y: Embeddings) -> Tensor:
    """AnglE similarity of x[i] with y[i]: |cos + sin| of the unit vectors, dimension i paired with i + D/2 for
    the sine (an odd D padded with a zero), as sentence-transformers' pairwise_angle_sim.

    Args:
        x, y: (n, D) vectors, dense or sparse (sparse are made dense).

    Returns:
        (n,) similarities.
    """
    x, y = _dense(_as_float(x)), _dense(_as_float(y))
    if x.shape[1] % 2:
        x, y = torch.nn.functional.pad(x, (0, 1)), torch.nn.functional.pad(y, (0, 1))
    x, y = normalize_embeddings(x), normalize_embeddings(y)
    x_first, x_last = x.chunk(2, dim=1)
    y_first, y_last = y.chunk(2, dim=1)
    sines = (x_last * y_first - x_first * y_last).sum(dim=1)
    return torch.abs((x * y).sum(dim=1) + sines)


def _dense(a: Tensor) -> Tensor:
    return a.to_dense() if a.is_sparse else a


# sentence-transformers' similarity_fn_name values, and the functions they name: (matrix, pairwise).
SIMILARITY_FUNCTIONS: dict[str, tuple[Callable[[Any, Any], Tensor], Callable[[Any, Any], Tensor]]] = {
    "cosine": (cos_sim, pairwise_cos_sim),
    "dot": (dot_score, pairwise_dot_score),
    "euclidean": (euclidean_sim, pairwise_euclidean_sim),
    "manhattan": (manhattan_sim, pairwise_manhattan_sim),
}


class SimilarityFunction(Enum):
    """The similarity functions by name, as sentence-transformers' enum (`model.similarity_fn_name = ...`)."""

    COSINE = "cosine"
    DOT_PRODUCT = "dot"
    DOT = "dot"  # an alias of DOT_PRODUCT
    EUCLIDEAN = "euclidean"
    MANHATTAN = "manhattan"
    MAXSIM = "maxsim"  # MultiVectorEncoder's
    MEAN_MAXSIM = "meanmaxsim"

    @staticmethod
    def possible_values() -> list[str]:
        """Every name, in the enum's order (the alias DOT once, as DOT_PRODUCT's "dot")."""
        return [member.value for member in SimilarityFunction]


# --- search -----------------------------------------------------------------------


def semantic_search(
    query_embeddings: Tensor,
    corpus_embeddings: Tensor,
    query_chunk_size: int = 100,
    corpus_chunk_size: int = 500000,
    top_k: int = 10,
    score_function: Callable[[Tensor, Tensor], Tensor] = cos_sim,
) -> list[list[dict[str, int | float]]]:
    """The top_k corpus entries for every query, by score_function (cosine similarity by default).

    Args:
        query_embeddings: (q, dim) or (dim,) query vectors (a tensor, an array, a list of vectors; sparse COO too).
        corpus_embeddings: (n, dim) corpus vectors.
        query_chunk_size: queries scored at once.
        corpus_chunk_size: corpus entries scored at once.
        top_k: hits per query.
        score_function: (queries, corpus) -> (q, n) scores, higher is closer.

    Returns:
        Per query, up to top_k {"corpus_id": int, "score": float}, highest score first.
    """
    query_embeddings = _as_tensor(query_embeddings)
    corpus_embeddings = _as_tensor(corpus_embeddings)
    if query_embeddings.dim() == 1:
        query_embeddings = query_embeddings.unsqueeze(0)
    if corpus_embeddings.device != query_embeddings.device:
        query_embeddings = query_embeddings.to(corpus_embeddings.device)
    results: list[list[Any]] = [[] for _ in range(len(query_embeddings))]
    # cos_sim is a dot product of normalized vectors: each corpus chunk is normalized once, not once per query chunk.
    normalize_chunks = score_function is cos_sim
    for corpus_start in range(0, len(corpus_embeddings), corpus_chunk_size):
        corpus_chunk = _rows(corpus_embeddings, corpus_start, corpus_start + corpus_chunk_size)
        if normalize_chunks:
            corpus_chunk = normalize_embeddings(_as_batch(corpus_chunk))
        for query_start in range(0, len(query_embeddings), query_chunk_size):
            query_chunk = _rows(query_embeddings, query_start, query_start + query_chunk_size)
            if normalize_chunks:
                scores = dot_score(normalize_embeddings(_as_batch(query_chunk)), corpus_chunk)
            else:
                scores = score_function(query_chunk, corpus_chunk)
            values, indices = torch.topk(scores, min(top_k, len(scores[0])), dim=1, largest=True, sorted=False)
            values_list = values.cpu().tolist()
            indices_list = (indices + corpus_start).cpu().tolist()
            for hits, corpus_ids, chunk_scores in zip(
                results[query_start : query_start + query_chunk_size], indices_list, values_list, strict=True
            ):
                # A min-heap of (score, corpus_id) up to top_k: a new candidate replaces the lowest.
                candidates = zip(chunk_scores, corpus_ids, strict=True)
                for candidate in islice(candidates, top_k - len(hits)):
                    heapq.heappush(hits, candidate)
                for candidate in candidates:
                    heapq.heappushpop(hits, candidate)
    return [
        [{"corpus_id": corpus_id, "score": score} for score, corpus_id in sorted(hits, key=itemgetter(0), reverse=True)]
        for hits in results
    ]


def community_detection(
    embeddings: Tensor | np.ndarray,
    threshold: float = 0.75,
    min_community_size: int = 10,
    batch_size: int = 1024,
    show_progress_bar: bool = False,
) -> list[list[int]]:
    """Groups of vectors close to a central one, as sentence-transformers' community_detection: each vector's
    community is every vector whose cosine similarity with it is at least threshold (itself included), most
    similar first; the largest communities are taken first, each without the members of those taken before, and
    kept when min_community_size members remain.

    Args:
        embeddings: (n, dim) vectors (or one).
        threshold: the least cosine similarity to the center.
        min_community_size: the fewest members a community keeps.
        batch_size: centers scored at once.
        show_progress_bar: accepted for sentence-transformers' signature; no bar is shown.

    Returns:
        The communities, largest first, each a list of indices that starts with its center.
    """
    if len(embeddings) == 0:
        return []
    vectors = normalize_embeddings(_as_batch(embeddings))
    if len(vectors) < min_community_size:
        return []
    candidates: list[tuple[int, list[int]]] = []
    for start in range(0, len(vectors), batch_size):
        scores = vectors[start : start + batch_size] @ vectors.T  # (batch, n)
        order = torch.argsort(scores, dim=1, descending=True, stable=True)
        counts = (scores >= threshold).sum(dim=1).tolist()
        for row, count in enumerate(counts):
            if count >= min_community_size:
                candidates.append((start + row, order[row, :count].tolist()))
    candidates.sort(key=lambda candidate: len(candidate[1]), reverse=True)  # stable: ties keep the centers' order
    used = np.zeros(len(vectors), dtype=bool)
    communities = []
    for center, members in candidates:
        if used[center]:
            continue
        free = [member for member in members if not used[member]]
        if len(free) >= min_community_size:
            community = [center, *(member for member in free if member != center)]
            communities.append(community)
            used[community] = True
    return sorted(communities, key=len, reverse=True)


def _rows(embeddings: Tensor, start: int, end: int) -> Tensor:
    if embeddings.is_sparse:
        end = min(end, len(embeddings))
        return embeddings.index_select(0, torch.arange(start, end, device=embeddings.device))
    return embeddings[start:end]


def paraphrase_mining(
    model: Embedder | Any,
    sentences: list[str],
    show_progress_bar: bool = False,
    batch_size: int = 32,
    query_chunk_size: int = 5000,
    corpus_chunk_size: int = 100000,
    max_pairs: int = 500000,
    top_k: int = 100,
    score_function: Callable[[Tensor, Tensor], Tensor] = cos_sim,
    truncate_dim: int | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
) -> list[list[float | int]]:
    """The most similar pairs among `sentences`, each sentence compared with every other.

    Args:
        model: what embeds them: an Embedder, or a model with sentence-transformers' encode (bertlite's
            SentenceTransformer or sentence-transformers').
        sentences: the texts.
        show_progress_bar, batch_size, truncate_dim, prompt_name, prompt: as model.encode's.
        query_chunk_size, corpus_chunk_size, max_pairs, top_k, score_function: as
            paraphrase_mining_embeddings's.

    Returns:
        [score, i, j] triplets (i < j), highest score first.
    """
    options = {"show_progress_bar": show_progress_bar, "truncate_dim": truncate_dim, "prompt": prompt}
    if "convert_to_tensor" in inspect.signature(model.encode).parameters:  # sentence-transformers' convention
        embeddings = model.encode(
            sentences, batch_size=batch_size, convert_to_tensor=True, prompt_name=prompt_name, **options
        )
    else:  # bertlite's Embedder, whose encode refuses prompt and prompt_name together: the prompt wins, as there
        embeddings = model.encode(
            sentences, batch_size, convert_to="torch", prompt_name=prompt_name if prompt is None else None, **options
        )
    return paraphrase_mining_embeddings(
        embeddings,
        query_chunk_size=query_chunk_size,
        corpus_chunk_size=corpus_chunk_size,
        max_pairs=max_pairs,
        top_k=top_k,
        score_function=score_function,
    )


def paraphrase_mining_embeddings(
    embeddings: Tensor,
    query_chunk_size: int = 5000,
    corpus_chunk_size: int = 100000,
    max_pairs: int = 500000,
    top_k: int = 100,
    score_function: Callable[[Tensor, Tensor], Tensor] = cos_sim,
) -> list[list[float | int]]:
    """The most similar pairs among `embeddings`.

    Args:
        embeddings: (n, dim) vectors.
        query_chunk_size: vectors compared with the others at once.
        corpus_chunk_size: others each is compared with at once.
        max_pairs: pairs returned at most.
        top_k: neighbours kept per vector.
        score_function: a symmetric (a, b) -> scores; only one direction of each pair is kept.

    Returns:
        [score, i, j] triplets (i < j), highest score first.
    """
    pairs: list[tuple[float, int, int]] = []  # a min-heap of (score, i, j), i < j, at most max_pairs long
    queued: set[tuple[int, int]] = set()
    min_score = float("-inf")
    for query_start in range(0, len(embeddings), query_chunk_size):
        queries = embeddings[query_start : query_start + query_chunk_size]
        # Each query's top_k over all corpus chunks, so the candidates do not depend on corpus_chunk_size.
        best_values: Tensor | None = None
        best_indices: Tensor | None = None
        for corpus_start in range(0, len(embeddings), corpus_chunk_size):
            scores = score_function(queries, embeddings[corpus_start : corpus_start + corpus_chunk_size]).detach()
            values, indices = torch.topk(scores, min(top_k + 1, len(scores[0])), dim=1, largest=True)
            indices = indices + corpus_start
            if best_values is None or best_indices is None:
                best_values, best_indices = values, indices
            else:
                values = torch.cat([best_values, values], dim=1)
                indices = torch.cat([best_indices, indices], dim=1)
                best_values, top = torch.topk(values, min(top_k + 1, len(values[0])), dim=1)
                best_indices = torch.gather(indices, 1, top)
        assert best_values is not None and best_indices is not None  # embeddings is not empty here
        for row, (js, row_scores) in enumerate(
            zip(best_indices.cpu().tolist(), best_values.cpu().tolist(), strict=True)
        ):
            i = query_start + row
            for j, score in [(j, s) for j, s in zip(js, row_scores, strict=True) if i != j][:top_k]:
                if score <= min_score:
                    continue
                pair = (i, j) if i < j else (j, i)
                if pair in queued:
                    continue
                queued.add(pair)
                if len(pairs) < max_pairs:
                    heapq.heappush(pairs, (score, *pair))
                else:
                    evicted = heapq.heappushpop(pairs, (score, *pair))
                    queued.discard(evicted[1:])
                    min_score = evicted[0]
    return sorted(([score, i, j] for score, i, j in pairs), key=lambda x: x[0], reverse=True)


# --- quantization -----------------------------------------------------------------


def quantize_embeddings(
    embeddings: Tensor | np.ndarray | list[Tensor] | list[np.ndarray],
    precision: Literal["float32", "int8", "uint8", "binary", "ubinary"],
    ranges: np.ndarray | None = None,
    calibration_embeddings: np.ndarray | None = None,
) -> np.ndarray | list[np.ndarray]:
    """Embeddings in a smaller type, as sentence-transformers' quantize_embeddings computes them.

    int8 / uint8 cut each dimension's range into 256 buckets; binary / ubinary keep the sign bits, 8 to a byte.

    Args:
        embeddings: float vectors (n, dim), or a list of (tokens, dim) matrices (multi-vector), which share
            one calibration.
        precision: "float32", "int8", "uint8", "binary" or "ubinary".
        ranges: (2, dim) per-dimension minimum and maximum for int8 / uint8; None: from
            calibration_embeddings, else from `embeddings` themselves.
        calibration_embeddings: vectors whose per-dimension range int8 / uint8 use.

    Returns:
        int8 / uint8 (n, dim); binary (int8) / ubinary (uint8) (n, ceil(dim / 8)); float32 (n, dim); a list
        for a list of matrices.

    Raises:
        ValueError: an unknown precision; int8 / uint8 ranges to compute from a single vector.
        TypeError: integer embeddings.
    """
    if isinstance(embeddings, list):
        if not embeddings:
            return []
        embeddings = [_to_numpy(e) if isinstance(e, Tensor) else e for e in embeddings]
        if isinstance(embeddings[0], np.ndarray) and embeddings[0].ndim == 2:
            return _quantize_matrices(embeddings, precision, ranges, calibration_embeddings)
        embeddings = np.array(embeddings)
    elif isinstance(embeddings, Tensor):
        embeddings = _to_numpy(embeddings)
    if embeddings.dtype in (np.uint8, np.int8):
        raise TypeError("embeddings to quantize must be float, not int8 or uint8")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "float32":
        return embeddings.astype(np.float32)
    if embeddings.ndim == 2 and embeddings.shape[0] == 0:  # nothing to calibrate or pack: the empty codes
        width = embeddings.shape[1] if precision.endswith("int8") else (embeddings.shape[1] + 7) // 8
        return np.zeros((0, width), dtype=np.int8 if precision in ("int8", "binary") else np.uint8)
    if precision.endswith("int8"):
        if ranges is None:
            ranges = _quantization_ranges(embeddings, precision, calibration_embeddings)
        ranges = ranges.astype(np.float32, copy=False)
        starts = ranges[0, :]
        steps = (ranges[1, :] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    bits = np.packbits(embeddings > 0, axis=-1)
    return (bits - 128).astype(np.int8) if precision == "binary" else bits


def _quantize_matrices(
    matrices: list[np.ndarray], precision: str, ranges: np.ndarray | None, calibration: np.ndarray | None
) -> list[np.ndarray]:
    """quantize_embeddings of multi-vector (tokens, dim) matrices, calibrated once, so all share the buckets."""
    if precision.endswith("int8") and ranges is None:
        data = np.concatenate(matrices, axis=0) if calibration is None else calibration
        if len(data):
            ranges = _quantization_ranges(data, precision, calibration)
    return [quantize_embeddings(m, precision, ranges, calibration) for m in matrices]  # type: ignore[arg-type,misc]


def _quantization_ranges(embeddings: np.ndarray, precision: str, calibration: np.ndarray | None) -> np.ndarray:
    """(2, dim): each dimension's minimum and maximum over `calibration`, else over `embeddings`."""
    if calibration is None:
        if embeddings.ndim == 1 or embeddings.shape[0] == 1:
            raise ValueError(
                f"cannot compute {precision} quantization ranges from a single embedding; give quantize_embeddings "
                "`ranges` or `calibration_embeddings` from a representative set of embeddings"
            )
        if embeddings.shape[0] < 100:
            logger.warning(
                "computing %s quantization buckets from %d embeddings; ranges from more embeddings "
                "(`ranges` or `calibration_embeddings`) are more stable",
                precision,
                len(embeddings),
            )
        calibration = embeddings
    return np.vstack((np.min(calibration, axis=0), np.max(calibration, axis=0)))


def _to_numpy(tensor: Tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()
