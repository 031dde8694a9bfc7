"""The SparseEncoder's members under sentence-transformers' names: encode_query and encode_document,
similarity, decode, sparsity, the embedding dimension, and save()'s hooks (STBase's one save path). A mixin of
bertlite.jobs.sparse_encoder.SparseEncoder, kept apart from the encoding path so each file holds one job.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from bertlite.jobs.inputs import check_count, check_sparse_row
from bertlite.jobs.sparse_vectors import SparseRow, as_batch, unit_rows
from bertlite.jobs.st.base import check_similarity_fn_name
from bertlite.jobs.st.folders import SPLADE_SIMILARITY_FUNCTIONS as SIMILARITY_FUNCTIONS
from bertlite.util import SIMILARITY_FUNCTIONS as UTIL_SIMILARITY_FUNCTIONS

# The similarity functions that are distances: bertlite.util's (matrix, pairwise) functions, exact on dense
# copies (sentence-transformers' sparse euclidean expands the norms, which loses digits for close vectors).
DISTANCES = {name: UTIL_SIMILARITY_FUNCTIONS[name] for name in ("euclidean", "manhattan")}
SPLADE_POOLING_MODULE = "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"


class SparseEncoderMembers:
    """What SparseEncoder answers under sentence-transformers' names."""

    # The similarity_fn_name values it takes, in sentence-transformers' order (its class attribute).
    SUPPORTED_SIMILARITY_FN_NAMES: ClassVar[tuple[str, ...]] = ("cosine", "dot", "euclidean", "manhattan")

    @property
    def similarity_fn_name(self) -> str:
        """What similarity() and similarity_pairwise() compute: "dot" (SPLADE's) or "cosine"; settable, as in
        sentence-transformers."""
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: str | None) -> None:
        """None: "dot"; sentence-transformers' SimilarityFunction members by their value
        (check_similarity_fn_name: ValueError for another name)."""
        self._similarity_fn_name = check_similarity_fn_name(value, SIMILARITY_FUNCTIONS)

    def get_embedding_dimension(self) -> int:
        """sentence-transformers' name for `dimension`."""
        return self.vocab_size

    def get_sentence_embedding_dimension(self) -> int:
        """sentence-transformers' older name for `dimension`."""
        return self.vocab_size

    def _transformer_config(self) -> dict[str, Any]:
        return {
            "transformer_task": "fill-mask",
            "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
            "module_output_name": "token_embeddings",
        }

    def _st_modules(self) -> list[tuple[str, str, dict[str, Any], torch.nn.Module | None]]:
        if getattr(self, "_static_query", None) is not None:
            raise ValueError(
                "saving inference-free SPLADE (a Router folder) is not implemented; keep the loaded folder"
            )
        config = {
            "pooling_strategy": self.pooling_strategy,
            "activation_function": self.activation_function,
            "embedding_dimension": None,  # as sentence-transformers saves it: the vocabulary's size, read at load
        }
        return [("SpladePooling", SPLADE_POOLING_MODULE, config, None)]

    def _st_config(self) -> dict[str, Any]:
        return {
            **super()._st_config(),
            "similarity_fn_name": self.similarity_fn_name,
            **({"max_active_dims": self.max_active_dims} if self.max_active_dims is not None else {}),
        }

    def decode(
        self, embeddings: Tensor | SparseRow, top_k: int | None = None
    ) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """A sparse vector's (token, weight) pairs, largest weight first, as sentence-transformers' decode.

        Args:
            embeddings: a (vocab_size,) or (n, vocab_size) tensor, sparse or dense; or one (indices, values)
                row of encode_tokenized().
            top_k: at most this many pairs per vector; None: all non-zero entries.

        Returns:
            For one vector a list of (token, weight); for n vectors a list of n such lists.

        Raises:
            ValueError: top_k not an integer >= 1, a tensor that is not 1-D or 2-D, an index outside the
                vocabulary, or indices and values of different lengths.
            TypeError: something else than a tensor or an (indices, values) pair.
        """
        check_count("top_k", top_k, none="all non-zero entries", must="a positive integer")
        if isinstance(embeddings, tuple) and len(embeddings) == 2:
            indices, values = (torch.as_tensor(np.asarray(part)) for part in embeddings)
            return self._decode_row(indices, values, top_k)
        if not isinstance(embeddings, Tensor):
            raise TypeError(
                f"Expected torch.Tensor or an (indices, values) pair to decode, got {type(embeddings).__name__}"
            )
        if embeddings.ndim not in (1, 2):
            raise ValueError(f"Input tensor must be 1D or 2D to decode, got {embeddings.ndim}D")
        batch = (embeddings if embeddings.ndim == 2 else embeddings.unsqueeze(0)).to_sparse().coalesce()
        indices, values = batch.indices(), batch.values()
        counts = torch.bincount(indices[0], minlength=batch.shape[0]).tolist()
        bounds = [0, *itertools.accumulate(counts)]
        decoded = [self._decode_row(indices[1, a:b], values[a:b], top_k) for a, b in itertools.pairwise(bounds)]
        return decoded[0] if embeddings.ndim == 1 else decoded

    def _decode_row(self, indices: Tensor, values: Tensor, top_k: int | None) -> list[tuple[str, float]]:
        check_sparse_row(indices, values, self.vocab_size)
        order = torch.argsort(values, descending=True, stable=True)[:top_k]
        return [
            (self.backend_tokenizer.id_to_token(int(i)), float(v))
            for i, v in zip(indices[order], values[order], strict=True)
        ]

    def similarity(self, embeddings1: Tensor | np.ndarray, embeddings2: Tensor | np.ndarray) -> Tensor:
        """Scores of every vector of embeddings1 against every vector of embeddings2: the dot product
        (SPLADE's), or cosine, minus the euclidean or manhattan distance, as similarity_fn_name says.

        Args:
            embeddings1, embeddings2: (n, vocab_size) or (vocab_size,) tensors (sparse or dense) or arrays.

        Returns:
            A dense (n1, n2) float32 tensor.
        """
        a, b = as_batch(embeddings1), as_batch(embeddings2)
        if self.similarity_fn_name in DISTANCES:
            return DISTANCES[self.similarity_fn_name][0](a, b)
        if self.similarity_fn_name == "cosine":
            a, b = unit_rows(a), unit_rows(b)
        with warnings.catch_warnings():
            # torch multiplies two sparse matrices through CSR, and says once that CSR is "in beta"
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.mm(a, b.t()).to_dense()

    def similarity_pairwise(self, embeddings1: Tensor | np.ndarray, embeddings2: Tensor | np.ndarray) -> Tensor:
        """Scores of vector i of embeddings1 with vector i of embeddings2, by similarity_fn_name (as similarity()).

        Args:
            embeddings1, embeddings2: (n, vocab_size) or (vocab_size,) tensors (sparse or dense) or arrays.

        Returns:
            A dense (n,) float32 tensor; for two single vectors, a 0-d one.
        """
        single = getattr(embeddings1, "ndim", 2) == 1 and getattr(embeddings2, "ndim", 2) == 1
        a, b = as_batch(embeddings1), as_batch(embeddings2)
        if self.similarity_fn_name in DISTANCES:
            scores = DISTANCES[self.similarity_fn_name][1](a, b)
        else:
            if self.similarity_fn_name == "cosine":
                a, b = unit_rows(a), unit_rows(b)
            scores = (a * b).sum(dim=-1).to_dense()
        return scores[0] if single else scores

    @staticmethod
    def intersection(embeddings_1: Tensor, embeddings_2: Tensor) -> Tensor:
        """The dimensions active in both vectors, with their products, as sentence-transformers' intersection (to
        show with decode() which tokens a query and a document share).

        Args:
            embeddings_1: one (vocab_size,) vector, sparse or dense.
            embeddings_2: a (vocab_size,) vector or (n, vocab_size) vectors, sparse or dense.

        Returns:
            A sparse COO tensor of embeddings_2's shape: embeddings_1 * embeddings_2 where the product is above 0.

        Raises:
            ValueError: embeddings_1 not 1-D, embeddings_2 not 1-D or 2-D, or the vocabularies' sizes differ.
        """
        if embeddings_1.ndim != 1:
            raise ValueError(f"Expected 1D tensor for embeddings_1, but got {embeddings_1.shape} shape.")
        if embeddings_2.ndim not in (1, 2):
            raise ValueError(f"Expected 1D or 2D tensor for embeddings_2, but got {embeddings_2.shape} shape.")
        if embeddings_1.shape[-1] != embeddings_2.shape[-1]:
            raise ValueError(
                f"Vocab dimension mismatch: embeddings_1 has {embeddings_1.shape[-1]}, "
                f"embeddings_2 has {embeddings_2.shape[-1]}."
            )
        product = (embeddings_1.to_dense() * embeddings_2.to_dense()).to_sparse().coalesce()
        keep = product.values() > 0  # shared active dimensions only
        return torch.sparse_coo_tensor(
            product.indices()[:, keep], product.values()[keep], size=product.shape, device=product.device
        ).coalesce()

    @staticmethod
    def sparsity(embeddings: Tensor) -> dict[str, float]:
        """The mean number of non-zero dimensions of the vectors and the mean share of zeros.

        Args:
            embeddings: a (vocab_size,) or (n, vocab_size) tensor, sparse or dense.

        Returns:
            {"active_dims": mean non-zeros per vector, "sparsity_ratio": 1 - active_dims / vocab_size}.

        Raises:
            TypeError, ValueError: not a tensor, or not 1-D or 2-D.
        """
        if not isinstance(embeddings, Tensor):
            raise TypeError(f"sparsity takes a tensor, got {type(embeddings).__name__}")
        if embeddings.ndim not in (1, 2):
            raise ValueError(f"sparsity takes a 1-D or 2-D tensor, got {embeddings.ndim}-D")
        batch = embeddings if embeddings.ndim == 2 else embeddings.unsqueeze(0)
        if batch.shape[0] == 0 or batch.shape[1] == 0:
            return {"active_dims": 0.0, "sparsity_ratio": 1.0}
        if batch.is_sparse:  # counted from the stored entries: a dense copy would be (n, vocab_size)
            batch = batch.coalesce()
            rows = batch.indices()[0][batch.values() != 0]
            active = float(torch.bincount(rows, minlength=batch.shape[0]).float().mean())
        else:
            active = float((batch != 0).sum(dim=1).float().mean())
        return {"active_dims": active, "sparsity_ratio": 1.0 - active / batch.shape[1]}
