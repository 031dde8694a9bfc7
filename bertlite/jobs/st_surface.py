"""sentence-transformers' surface that the jobs share: tokenizer, tokenize, max_seq_length, to, save / save_pretrained.

STSurface is mixed into CrossEncoder, SparseEncoder and MultiVectorEncoder (its STMembers, the tokenizer and
the pool, into SentenceTransformer too); each job names the modules, Transformer settings and config its saved
folder holds (_st_modules, _transformer_config, _st_config), and save() writes the folder sentence-transformers
loads.
"""

from __future__ import annotations

import inspect
import json
import os
import weakref
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from bertlite.jobs.process_pool import run_in_pool, start_pool, stop_pool
from bertlite.jobs.st_compat import resolve_model_name, st_load_kwargs
from bertlite.quant.int8 import is_quantized
from bertlite.tokenization import BertTokenizer

__all__ = ["STSurface", "STMembers", "check_wrapped"]
# The special tokens a saved tokenizer names: the first of each that its vocabulary has (BERT's, then
# RoBERTa's). The pad token is the one the job pads with (jobs.base.pad_id).
SPECIAL_TOKENS = {
    "cls_token": ("[CLS]", "<s>"),
    "sep_token": ("[SEP]", "</s>"),
    "unk_token": ("[UNK]", "<unk>"),
    "mask_token": ("[MASK]", "<mask>"),
}
TRANSFORMER_MODULE = "sentence_transformers.base.modules.transformer.Transformer"
# Each job's transformers tokenizer, built on first use; kept beside the job, not in it, so a job pickled for
# a pool of processes carries none (it holds a lock).
_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def transformers_tokenizer(backend: Tokenizer, max_length: int, pad_id: int) -> BertTokenizer:
    """transformers' tokenizer surface over a job's `tokenizers` backend: what sentence-transformers' model.tokenizer
    is, and what save() writes.

    Args:
        backend: the job's tokenizer (a copy is wrapped, without truncation).
        max_length: the job's max_length, as model_max_length.
        pad_id: the id the job pads with: its token is the pad token.

    Returns:
        A BertTokenizer that runs the backend as it is (its normalizer, pre-tokenizer and template), with the
        special tokens its vocabulary has (BERT's or RoBERTa's names).
    """
    specials = {"pad_token": backend.id_to_token(pad_id)}
    for name, candidates in SPECIAL_TOKENS.items():
        found = [token for token in candidates if backend.token_to_id(token) is not None]
        if found:
            specials[name] = found[0]
    copy = Tokenizer.from_str(backend.to_str())
    copy.no_truncation()
    return BertTokenizer(
        copy,
        bert_pipeline=False,  # the backend as it is: its normalizer, pre-tokenizer and template
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        model_max_length=max_length,
        **specials,
    )


class STMembers:
    """sentence-transformers' members that its four classes share: tokenizer and tokenize (transformers' tokenizer
    surface and padded input tensors), and the multi-process pool's start and stop.

    Mixed into SentenceTransformer, CrossEncoder, SparseEncoder and MultiVectorEncoder before BaseEncoder, whose
    backend_tokenizer (the `tokenizers` Tokenizer the job runs), pad_id, max_length and preprocess it reads.
    """

    backend_tokenizer: Tokenizer
    pad_id: int
    max_length: int
    preprocess: Any

    @property
    def tokenizer(self) -> BertTokenizer:
        """transformers' tokenizer surface over the job's tokenizer, as sentence-transformers' model.tokenizer:
        callable (padding, truncation, return_tensors), tokenize, decode, the vocabulary; model_max_length is
        max_seq_length. The `tokenizers` backend the job runs is backend_tokenizer."""
        key = (id(self.backend_tokenizer), self.max_length)
        cached = _TOKENIZERS.get(self)
        if cached is None or cached[0] != key:
            surface = transformers_tokenizer(self.backend_tokenizer, self.max_length, self.pad_id)
            cached = _TOKENIZERS[self] = (key, surface)
        return cached[1]

    @tokenizer.setter
    def tokenizer(self, value: Any) -> None:
        """A transformers-style tokenizer (its backend_tokenizer runs) or a `tokenizers` Tokenizer."""
        self._set_backend(getattr(value, "backend_tokenizer", value))

    def tokenize(self, texts: list[str] | list[dict] | list[tuple[str, str]], **kwargs: Any) -> dict[str, Tensor]:
        """The model's inputs for texts, right-padded, as sentence-transformers' tokenize (its older name for
        preprocess) gives them; encodings() gives the unpadded `tokenizers` Encodings the job runs on.

        Args:
            texts: strings, or (text_a, text_b) pairs.
            **kwargs: preprocess()'s (prompt).

        Returns:
            preprocess()'s BatchEncoding: input_ids, token_type_ids and attention_mask as (B, T) tensors.
        """
        return self.preprocess(texts, **kwargs)

    def start_multi_process_pool(self, target_devices: list[str] | None = None) -> dict[str, Any]:
        """Start processes that each run a copy of this model, for pool= (bertlite.jobs.process_pool.start_pool:
        the model moves to the CPU first; CPU processes share the cores).

        Args:
            target_devices: one process per entry ("cuda:0", "cpu", ...); None: every CUDA device, else
                min(4, os.cpu_count()) CPU processes.

        Returns:
            The pool: {"input": queue, "output": queue, "processes": [...]}; stop it with
            stop_multi_process_pool.
        """
        return start_pool(self, target_devices)

    @staticmethod
    def stop_multi_process_pool(pool: dict[str, Any]) -> None:
        """Stop the processes of a pool start_multi_process_pool started, and close its queues."""
        stop_pool(pool)


class STSurface(STMembers):
    """sentence-transformers' members that every job besides SentenceTransformer shares: STMembers', and the loading
    by name, the pool's calls, save / save_pretrained.

    Mixed into CrossEncoder, SparseEncoder and MultiVectorEncoder, before BaseEncoder (it reads its
    model, bert, backend_tokenizer, max_length, prompts and pack_weights).
    """

    model: Any
    bert: Any
    max_length: int
    prompts: dict[str, str]
    default_prompt_name: str | None
    pack_weights: bool

    @classmethod
    def _load(cls, name_or_path: str | os.PathLike, **kwargs: Any) -> tuple[nn.Module, Tokenizer, dict[str, Any]]:
        """from_pretrained's loading: the model, its tokenizer and the folder's settings for __init__."""
        raise NotImplementedError

    def _load_by_name(
        self,
        model_name_or_path: str | os.PathLike,
        tokenizer: Tokenizer | None,
        organization: str | None,
        st_kwargs: dict[str, Any],
    ) -> tuple[nn.Module, Tokenizer, dict[str, Any]]:
        """The constructor given a name: resolved as sentence-transformers resolves it (a bare name under
        `organization`), its keywords mapped (st_load_kwargs), loaded as from_pretrained loads it.

        Raises:
            TypeError: a tokenizer given with a name, or a name that is not a str or path.
            ValueError: what st_load_kwargs and the loading refuse.
        """

        name = type(self).__name__
        if not isinstance(model_name_or_path, str | os.PathLike):
            raise TypeError(
                f"{name} takes a model name or path (sentence-transformers' way), or a model and its tokenizer; "
                f"got {type(model_name_or_path).__name__}"
            )
        if tokenizer is not None:
            raise TypeError(f"{name}({model_name_or_path!r}, tokenizer): the folder's tokenizer is loaded with it")
        resolved = resolve_model_name(model_name_or_path, organization)
        return self._load(resolved, **st_load_kwargs(**st_kwargs))

    def _pooled(
        self,
        device: str | torch.device | list | None,
        pool: Any,
        chunk_size: int | None,
        method: str,
        items: list[Any],
        share: bool = True,
        **kwargs: Any,
    ) -> list[Any] | None:
        """A call's placement (predict, rank, encode): with a pool or a list of devices, `method`'s results of
        each chunk of `items` from the pool's processes (run_in_pool); else None, the model moved to the
        one device given (to()), and the call runs here. A single input (share False) or none runs here.

        Raises:
            ValueError: chunk_size without a pool or a device list.
        """
        if not share or not items:  # nothing to share out
            pool, chunk_size = None, None
            device = None if isinstance(device, list | tuple) else device
        if pool is not None or (isinstance(device, list | tuple) and device):
            return run_in_pool(self, method, items, pool, None if pool is not None else device, chunk_size, kwargs)
        if chunk_size is not None:
            raise ValueError("chunk_size applies to a multi-process pool: give pool= or a list of devices")
        if device is not None and not isinstance(device, list | tuple):
            self.to(device)
        return None

    def save(
        self,
        path: str,
        model_name: str | None = None,
        create_model_card: bool = True,
        train_datasets: list[str] | None = None,
        safe_serialization: bool = True,
    ) -> None:
        """Write a folder that sentence-transformers' class of the same name loads with the same outputs,
        and that this class's from_pretrained loads back.

        Args:
            path: the folder, created if needed.
            model_name, create_model_card, train_datasets: sentence-transformers' model-card options; no
                model card (README.md) is written.
            safe_serialization: model.safetensors; False: pytorch_model.bin.

        Raises:
            ValueError: an int8-quantized model (bertlite does not save int8), or path is a file.
        """
        if is_quantized(self.bert):
            raise ValueError(
                "this model is int8-quantized, which bertlite does not save; load the float32 model to save it "
                "and quantize at load (dtype='int8')"
            )
        folder = Path(path)
        self.model.save_pretrained(folder, safe_serialization=safe_serialization)
        self._save_tokenizer(folder)
        modules = [{"idx": 0, "name": "0", "path": "", "type": TRANSFORMER_MODULE}]
        for idx, (name, kind, config, weights) in enumerate(self._st_modules(), start=1):
            subfolder = folder / f"{idx}_{name}"
            subfolder.mkdir(exist_ok=True)
            _write_json(subfolder / "config.json", config)
            if weights is not None:
                _save_weights(weights, subfolder, safe_serialization)
            modules.append({"idx": idx, "name": str(idx), "path": subfolder.name, "type": kind})
        _write_json(folder / "modules.json", modules)
        _write_json(folder / "sentence_bert_config.json", self._transformer_config())
        _write_json(folder / "config_sentence_transformers.json", self._st_config())

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

    def _save_tokenizer(self, folder: Path) -> None:
        """tokenizer.json as this encoder runs it (no truncation or padding stored), and tokenizer_config.json
        with max_length as model_max_length, which sentence-transformers reads as max_seq_length."""
        transformers_tokenizer(self.backend_tokenizer, self.max_length, self.pad_id).save_pretrained(folder)

    def _st_modules(self) -> list[tuple[str, str, dict[str, Any], torch.nn.Module | None]]:
        """The modules after the Transformer: (folder name, class path, config, module with weights or None)."""
        return []

    def _transformer_config(self) -> dict[str, Any]:
        """sentence_bert_config.json: the Transformer module's settings."""
        raise NotImplementedError

    def _st_config(self) -> dict[str, Any]:
        """config_sentence_transformers.json: the model type, prompts and the job's settings."""
        from bertlite import __version__  # the package's own name, not its lazy table: no import cycle

        return {
            "__version__": {"bertlite": __version__, "pytorch": torch.__version__},
            "model_type": type(self).__name__,
            "prompts": self.prompts,
            "default_prompt_name": self.default_prompt_name,
        }


def check_wrapped(tokenizer: Tokenizer | None, st_kwargs: dict[str, Any]) -> None:
    """A job's constructor given a model: its tokenizer is required, and of the loading options only
    `device` applies (the model is moved there).

    Raises:
        TypeError: no tokenizer, or a loading option other than device.
    """

    if tokenizer is None:
        raise TypeError("a model needs its tokenizer: pass (model, tokenizer), or a model name or path")
    defaults = inspect.signature(st_load_kwargs).parameters
    given = sorted(key for key, value in st_kwargs.items() if key != "device" and value != defaults[key].default)
    if given:
        raise TypeError(
            f"{', '.join(given)} load a checkpoint by name; with a model object they do not apply "
            "(load by name, or use from_pretrained)"
        )


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _save_weights(module: torch.nn.Module, folder: Path, safe_serialization: bool) -> None:
    """A module's float tensors as model.safetensors (or pytorch_model.bin), the keys of its state_dict."""
    state = {key: value.detach().contiguous().cpu() for key, value in module.state_dict().items()}
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(state, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")
