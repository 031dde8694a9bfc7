"""The Embedder's members under sentence-transformers' names: similarity, max_seq_length, encode_query and
encode_document, to, save (a folder sentence-transformers loads). A mixin of Embedder, kept apart
from the encoding path so each file holds one job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bertlite.jobs.base import Text
from bertlite.jobs.st_surface import transformers_tokenizer
from bertlite.quant.int8 import is_quantized
from bertlite.util import SIMILARITY_FUNCTIONS

# The sentence-transformers modules a saved folder names (their class paths in sentence-transformers 6).
ST_MODULES = {
    "Transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "Pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    "Normalize": "sentence_transformers.base.modules.normalize.Normalize",
}
# sentence-transformers' pooling_mode names where bertlite's differ.
ST_POOLING_NAMES = {"mean_sqrt_len": "mean_sqrt_len_tokens"}


class SentenceTransformerMembers:
    """What Embedder answers under sentence-transformers' names (SentenceTransformer has them too)."""

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
            raise ValueError(
                f"{type(self).__name__} only supports similarity_fn_name in {list(SIMILARITY_FUNCTIONS)}, got {value!r}"
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
        if prompt_name is None and prompt is None and "query" in self.prompts:
            return "query"
        return prompt_name

    def document_prompt_name(self, prompt_name: str | None, prompt: str | None) -> str | None:
        """The prompt encode_document uses: the one given, else the first of "document", "passage" and
        "corpus" the model has (sentence-transformers' rule)."""
        if prompt_name is None and prompt is None:
            return next((name for name in ("document", "passage", "corpus") if name in self.prompts), None)
        return prompt_name

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

    def save(
        self,
        path: str,
        model_name: str | None = None,
        create_model_card: bool = True,
        train_datasets: list[str] | None = None,
        safe_serialization: bool = True,
    ) -> None:
        """Write a folder that sentence-transformers' SentenceTransformer loads with the same vectors, and
        from_pretrained loads back.

        The folder: the model (config.json, model.safetensors), the tokenizer (tokenizer.json,
        tokenizer_config.json with max_seq_length as model_max_length), modules.json with the Transformer,
        Pooling and (when normalizing) Normalize modules, and config_sentence_transformers.json with the
        prompts and similarity_fn_name.

        Args:
            path: the folder, created if needed.
            model_name, create_model_card, train_datasets: sentence-transformers' model-card options; no
                model card (README.md) is written.
            safe_serialization: model.safetensors; False: pytorch_model.bin.

        Raises:
            ValueError: an int8-quantized model (bertlite does not save int8), pooling "pooler" (which
                sentence-transformers' Pooling lacks), or `path` is a file.
        """
        if is_quantized(self.bert):
            raise ValueError(
                "this model is int8-quantized, which bertlite does not save; load the float32 model to save it "
                "and quantize at load (dtype='int8')"
            )
        if "pooler" in self.pooling:
            raise ValueError("pooling='pooler' has no sentence-transformers Pooling mode, so no folder can say it")
        folder = Path(path)
        self.bert.save_pretrained(folder, safe_serialization=safe_serialization)
        transformers_tokenizer(self.backend_tokenizer, self.max_length, self.pad_id).save_pretrained(folder)
        modules = [{"idx": 0, "name": "0", "path": "", "type": ST_MODULES["Transformer"]}]
        pooling = [ST_POOLING_NAMES.get(mode, mode) for mode in self.pooling]
        extra = {
            "1_Pooling": {
                "embedding_dimension": self.bert.config.hidden_size,
                "pooling_mode": pooling[0] if len(pooling) == 1 else pooling,
                "include_prompt": self.include_prompt,
            },
        }
        if self.normalize:
            extra["2_Normalize"] = {
                "module_input_name": "sentence_embedding",
                "module_output_name": "sentence_embedding",
            }
        for idx, (name, config) in enumerate(extra.items(), start=1):
            (folder / name).mkdir(exist_ok=True)
            _write_json(folder / name / "config.json", config)
            modules.append({"idx": idx, "name": str(idx), "path": name, "type": ST_MODULES[name.split("_", 1)[1]]})
        _write_json(folder / "modules.json", modules)
        _write_json(
            folder / "sentence_bert_config.json",
            {
                "transformer_task": "feature-extraction",
                "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
                "module_output_name": "token_embeddings",
            },
        )
        from bertlite import __version__

        _write_json(
            folder / "config_sentence_transformers.json",
            {
                "__version__": {"bertlite": __version__, "pytorch": torch.__version__},
                "model_type": "SentenceTransformer",
                "prompts": self.prompts,
                "default_prompt_name": self.default_prompt_name,
                "similarity_fn_name": self.similarity_fn_name,
            },
        )

    def save_pretrained(
        self,
        path: str,
        model_name: str | None = None,
        create_model_card: bool = True,
        train_datasets: list[str] | None = None,
        safe_serialization: bool = True,
    ) -> None:
        """The same as save()."""
        self.save(path, model_name, create_model_card, train_datasets, safe_serialization)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
