"""The MultiVectorEncoder's members under sentence-transformers' names: encode_query and encode_document,
similarity (MaxSim), the embedding dimension, and save()'s hooks (STBase's one save path). A mixin of
bertlite.jobs.multi_vector.MultiVectorEncoder, kept apart from the encoding path so each file holds one job.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from bertlite.jobs.maxsim import maxsim, maxsim_pairwise
from bertlite.jobs.projection import Dense, Normalize
from bertlite.jobs.st.base import FEATURE_EXTRACTION, NORMALIZE_MODULE, check_similarity_fn_name
from bertlite.jobs.st.folders import DENSE_ACTIVATIONS, SIMILARITY_FN_NAMES

# What save() writes for each module after the Transformer: sentence-transformers' classes.
DENSE_MODULE = "sentence_transformers.base.modules.dense.Dense"
MASK_MODULE = "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"
TOKEN_VECTORS = {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"}


class MultiVectorMembers:
    """What MultiVectorEncoder answers under sentence-transformers' names."""

    # The similarity_fn_name values it takes (sentence-transformers' class attribute).
    SUPPORTED_SIMILARITY_FN_NAMES: ClassVar[tuple[str, ...]] = SIMILARITY_FN_NAMES

    @property
    def similarity_fn_name(self) -> str:
        """What similarity() and similarity_pairwise() compute: "maxsim" or "meanmaxsim"; settable, as in
        sentence-transformers."""
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: str | None) -> None:
        """None: "maxsim" (check_similarity_fn_name: ValueError for another name)."""
        self._similarity_fn_name = check_similarity_fn_name(value, SIMILARITY_FN_NAMES)

    def get_embedding_dimension(self) -> int:
        """sentence-transformers' name for `dimension`."""
        return self.dimension

    def _transformer_config(self) -> dict[str, Any]:
        lengths = {"query_length": self.query_length, "document_length": self.document_length}
        return {
            **FEATURE_EXTRACTION,
            **{key: value for key, value in lengths.items() if value is not None},
            **({"query_expansion": self.query_expansion} if self.query_expansion else {}),
        }

    def _st_modules(self) -> list[tuple[str, str, dict[str, Any], nn.Module | None]]:
        """The projection's Dense and Normalize steps, the mask (MultiVectorMask) before a final Normalize.

        Raises:
            ValueError: a projection step other than Dense or Normalize, which no sentence-transformers
                module names.
        """
        paths = {name: path for path, name in DENSE_ACTIVATIONS.items()}
        steps: list[tuple[str, str, dict[str, Any], nn.Module | None]] = []
        for step in self.projection if isinstance(self.projection, nn.Sequential) else [self.projection]:
            if isinstance(step, Dense):
                config = {
                    "in_features": step.linear.in_features,
                    "out_features": step.linear.out_features,
                    "bias": step.linear.bias is not None,
                    "activation_function": paths[step.activation],
                    "use_residual": step.use_residual,
                    **TOKEN_VECTORS,
                }
                steps.append(("Dense", DENSE_MODULE, config, step))
            elif isinstance(step, Normalize):
                steps.append(("Normalize", NORMALIZE_MODULE, dict(TOKEN_VECTORS), None))
            else:
                raise ValueError(
                    f"save: the projection step {type(step).__name__} is not a Dense or Normalize, which "
                    "sentence-transformers' modules name"
                )
        mask = {
            "skiplist_words": [self.backend_tokenizer.id_to_token(i) for i in sorted(self.skiplist_ids)],
            "skiplist_tasks": self.skiplist_tasks,
            "keep_only_token_ids": sorted(self.keep_only_token_ids) if self.keep_only_token_ids is not None else None,
        }
        at = len(steps) - 1 if steps and steps[-1][0] == "Normalize" else len(steps)
        steps.insert(at, ("MultiVectorMask", MASK_MODULE, mask, None))
        return steps

    def _st_config(self) -> dict[str, Any]:
        truncate = {"truncate_dim": self.truncate_dim} if self.truncate_dim is not None else {}
        return {**super()._st_config(), "similarity_fn_name": self.similarity_fn_name, **truncate}

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Tensor:
        """The all-pairs MaxSim (or MeanMaxSim, by similarity_fn_name) matrix of queries and documents.

        Args:
            embeddings1: query token vectors: a list of (tokens, dim) tensors or arrays, one
                (tokens, dim) item, or a zero-padded (n, tokens, dim) batch.
            embeddings2: document token vectors, in the same forms.

        Returns:
            float32 (n_queries, n_documents) tensor; a document without tokens scores -1e9.
        """
        return maxsim(embeddings1, embeddings2, length_normalize=self.similarity_fn_name == "meanmaxsim")

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Tensor:
        """MaxSim (or MeanMaxSim) of query i with document i.

        Args:
            embeddings1, embeddings2: as in similarity(), the same number of each.

        Returns:
            float32 (n,) tensor.
        """
        return maxsim_pairwise(embeddings1, embeddings2, length_normalize=self.similarity_fn_name == "meanmaxsim")
