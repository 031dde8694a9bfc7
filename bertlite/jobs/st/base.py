"""sentence-transformers' base class, as its `base/model.py::BaseModel`: what every job shares under its names.

STBase takes the loading keywords once (LoadingKeywords, mapped to from_pretrained's options), resolves a bare
name under the class's default_huggingface_organization, picks the device as sentence-transformers does
(default_device: CUDA, else MPS, else the CPU), owns the multi-process pool and the one save path:
save() writes the Transformer (model and tokenizer), then the modules each job names (_st_modules), the
Transformer's settings (_transformer_config) and config_sentence_transformers.json (_st_config).
Embedder, SentenceTransformer, CrossEncoder, SparseEncoder and MultiVectorEncoder mix it in before BaseEncoder.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from bertlite.config import FAMILIES
from bertlite.jobs.prepare import LoadOptions
from bertlite.jobs.process_pool import run_in_pool, start_pool, stop_pool
from bertlite.jobs.st.folders import M3_FILES
from bertlite.jobs.st.logs import logger
from bertlite.jobs.st.names import resolve_model_name
from bertlite.jobs.st.remote_code import check_remote_code
from bertlite.quant.int8 import is_quantized
from bertlite.tokenization import BertTokenizer

__all__ = [
    "LoadingKeywords",
    "STBase",
    "check_similarity_fn_name",
    "check_wrapped",
    "default_device",
    "set_attention",
    "st_load_kwargs",
    "transformers_tokenizer",
]

# The special tokens a saved tokenizer names: the first of each that its vocabulary has (BERT's, then
# RoBERTa's). The pad token is the one the job pads with (jobs.base.pad_id).
SPECIAL_TOKENS = {
    "cls_token": ("[CLS]", "<s>"),
    "sep_token": ("[SEP]", "</s>"),
    "unk_token": ("[UNK]", "<unk>"),
    "mask_token": ("[MASK]", "<mask>"),
}
# The sentence-transformers modules saved folders name (their class paths in sentence-transformers 6).
TRANSFORMER_MODULE = "sentence_transformers.base.modules.transformer.Transformer"
NORMALIZE_MODULE = "sentence_transformers.base.modules.normalize.Normalize"
# sentence_bert_config.json of a Transformer that gives token embeddings (the embedding jobs' models).
FEATURE_EXTRACTION = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
}
# A module's folder as sentence-transformers names it ("1_Pooling", "2_Dense"), and the files a module's save
# writes there: the only ones save() removes from a module folder an earlier save left.
MODULE_FOLDER = re.compile(r"[0-9]+_[A-Za-z][A-Za-z0-9_]*")
MODULE_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")
# The prompts encode_query and encode_document use unless given one: the first of their task's the model has.
TASK_PROMPTS = {"query": ("query",), "document": ("document", "passage", "corpus")}
# model_kwargs keys bertlite reads: the dtype under either of transformers' names, a device_map that names one
# device, attn_implementation, low_cpu_mem_usage (accepted, no effect: bertlite always loads without a second copy
# of the weights), and default_task (the task adapter encode runs without a task, as jina-embeddings-v3's code
# reads it).
MODEL_KWARGS = ("dtype", "torch_dtype", "device_map", "attn_implementation", "low_cpu_mem_usage", "default_task")
# transformers' attn_implementation names bertlite takes: "eager" runs its eager reference; the others are what
# it picks for the device anyway (SDPA, or flash attention where it runs on CUDA).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3")
# Each job's transformers tokenizer, built on first use; kept beside the job, not in it, so a job pickled for
# a pool of processes carries none (it holds a lock).
_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def default_device() -> str:
    """The device sentence-transformers picks when given none (its get_device_name): CUDA, else Apple's MPS,
    else the CPU."""
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


@dataclass(frozen=True)
class LoadingKeywords:
    """sentence-transformers' loading keywords, as every job's constructor takes them (BaseModel's).

    device: where the model runs; None: default_device() when loading by name.
    trust_remote_code: True is taken for a checkpoint whose family bertlite implements (check_remote_code): bertlite's
        own code runs, never the checkpoint's.
    cache_folder: the hub cache, as `cache_dir`; None: $SENTENCE_TRANSFORMERS_HOME if set (as
        sentence-transformers reads it), else huggingface_hub's default.
    revision, local_files_only, token: hub options, passed on under the same names.
    model_kwargs: "dtype" or "torch_dtype" (unset: float32; a torch dtype, its name or "auto": bertlite's
        "auto", chosen for this machine, not config.json's dtype), and "device_map" naming one device (it wins
        over `device`, as in sentence-transformers), "attn_implementation" (ATTN_IMPLEMENTATIONS: "eager" runs the
        eager reference) and "low_cpu_mem_usage" (no effect). Other keys are refused.
    processor_kwargs, config_kwargs: must be empty: bertlite reads the tokenizer and config as saved.
    use_kernels, kernel_config: must be off: bertlite chooses its kernels itself.
    backend: must be "torch".
    """

    device: Any = None
    trust_remote_code: bool = False
    cache_folder: str | os.PathLike | None = None
    revision: str | None = None
    local_files_only: bool = False
    token: bool | str | None = None
    model_kwargs: dict[str, Any] | None = None
    processor_kwargs: dict[str, Any] | None = None
    config_kwargs: dict[str, Any] | None = None
    use_kernels: bool = False
    kernel_config: Any = None
    backend: str = "torch"

    @classmethod
    def of(cls, arguments: dict[str, Any]) -> LoadingKeywords:
        """The loading keywords among a constructor's arguments (its locals()), by name."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls)})

    def given(self) -> list[str]:
        """The keywords besides device that are not at their defaults, sorted."""
        default = LoadingKeywords()
        return sorted(
            f.name for f in fields(self) if f.name != "device" and getattr(self, f.name) != getattr(default, f.name)
        )

    def from_pretrained_kwargs(self, name_or_path: str | os.PathLike | None = None) -> dict[str, Any]:
        """These keywords as the keywords of a bertlite job's from_pretrained.

        Args:
            name_or_path: the resolved folder or hub id, where trust_remote_code=True is checked against its
                config.json (check_remote_code); None: trust_remote_code=True is refused.

        Returns:
            device, revision, cache_dir, local_files_only, token, and dtype when model_kwargs gives one
            (else from_pretrained's default applies). device stays None when none is given.

        Raises:
            ValueError: trust_remote_code=True that check_remote_code refuses (always, without name_or_path), an
                option bertlite does not have, or model_kwargs with a key
                it does not read, naming what to do instead.
        """
        _refuse_unsupported(self)
        model_kwargs = _checked_model_kwargs(self.model_kwargs)
        cache_folder = self.cache_folder if self.cache_folder is not None else os.getenv("SENTENCE_TRANSFORMERS_HOME")
        kwargs: dict[str, Any] = {
            "device": model_kwargs.get("device_map", self.device),
            "revision": self.revision,
            "cache_dir": cache_folder,
            "local_files_only": self.local_files_only,
            "token": self.token,
        }
        for key in ("dtype", "torch_dtype"):
            if key in model_kwargs:
                kwargs["dtype"] = model_kwargs[key]
        if self.trust_remote_code:
            if name_or_path is None:
                raise ValueError(
                    "trust_remote_code=True: bertlite runs no code from a checkpoint, only the BERT-family models "
                    f"it implements ({', '.join(FAMILIES)}); leave trust_remote_code=False"
                )
            hub = {key: kwargs[key] for key in ("revision", "cache_dir", "local_files_only", "token")}
            check_remote_code(name_or_path, hub)
        return kwargs


def st_load_kwargs(**keywords: Any) -> dict[str, Any]:
    """sentence-transformers' constructor keywords (LoadingKeywords') as the keywords of a bertlite job's
    from_pretrained: LoadingKeywords(**keywords).from_pretrained_kwargs()."""
    return LoadingKeywords(**keywords).from_pretrained_kwargs()


def _checked_model_kwargs(model_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """model_kwargs, refused where bertlite does not read a key, gives the dtype twice, or a device_map that
    is not one device."""
    model_kwargs = dict(model_kwargs or {})
    unknown = sorted(set(model_kwargs) - set(MODEL_KWARGS))
    if unknown:
        raise ValueError(
            f"model_kwargs {unknown} are not read by bertlite; it reads only {list(MODEL_KWARGS)} "
            "(see docs/migration.md)"
        )
    attention = model_kwargs.get("attn_implementation")
    if attention is not None and attention not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"model_kwargs attn_implementation={attention!r} must be one of {list(ATTN_IMPLEMENTATIONS)}")
    if "dtype" in model_kwargs and "torch_dtype" in model_kwargs:
        raise ValueError("model_kwargs gives both 'dtype' and 'torch_dtype'; give one ('dtype')")
    device_map = model_kwargs.get("device_map")
    if isinstance(device_map, dict) and list(device_map) == [""]:  # {"": device}: the whole model on that device
        device_map = model_kwargs["device_map"] = (
            f"cuda:{device_map['']}" if isinstance(device_map[""], int) else str(device_map[""])
        )
    if device_map is None:
        model_kwargs.pop("device_map", None)
    elif not isinstance(device_map, str) or device_map in ("auto", "balanced", "balanced_low_0", "sequential"):
        raise ValueError(
            f"model_kwargs device_map={device_map!r}: bertlite runs a model on one device; give that device "
            "(device='cuda:1' or device_map='cuda:1')"
        )
    return model_kwargs


def set_attention(model: nn.Module, model_kwargs: dict[str, Any] | None) -> None:
    """Run `model`'s attention eagerly, as transformers' eager reference, when model_kwargs asks for
    attn_implementation="eager"; any other name leaves bertlite's choice for the device.

    Args:
        model: the loaded model (a job readies it later, or has readied it: "eager" undoes that).
        model_kwargs: sentence-transformers' model_kwargs, checked by _checked_model_kwargs.
    """
    if (model_kwargs or {}).get("attn_implementation") == "eager" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")


def _refuse_unsupported(keywords: LoadingKeywords) -> None:
    """Raise ValueError for the sentence-transformers options bertlite has no counterpart of."""
    if keywords.backend != "torch":
        raise ValueError(f"backend={keywords.backend!r}: bertlite runs on torch only; use backend='torch'")
    if keywords.use_kernels or keywords.kernel_config is not None:
        raise ValueError("use_kernels/kernel_config: bertlite chooses its own kernels; leave them unset")
    for name in ("processor_kwargs", "config_kwargs"):
        if extra := getattr(keywords, name):
            raise ValueError(
                f"{name}={extra!r}: bertlite reads the checkpoint's tokenizer and config as saved and takes no "
                f"{name}; leave it unset"
            )


def check_similarity_fn_name(value: Any, names: tuple[str, ...]) -> str:
    """A job's similarity_fn_name: one of `names`, or None for the first (the job's default); a
    sentence_transformers.SimilarityFunction member by its value.

    Raises:
        ValueError: another name, naming the ones allowed.
    """
    value = getattr(value, "value", value)
    if value not in (None, *names):
        hint = (
            " Use MultiVectorEncoder for MaxSim late-interaction scoring." if value in ("maxsim", "meanmaxsim") else ""
        )
        raise ValueError(f"similarity_fn_name={value!r} must be one of {', '.join(names)}.{hint}")
    return value or names[0]


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


class STBase:
    """sentence-transformers' members that its classes share: loading by name (LoadingKeywords, the class's
    default_huggingface_organization, default_device), tokenizer and tokenize (transformers' tokenizer surface
    and padded input tensors), the multi-process pool, save / save_pretrained.

    Mixed in before BaseEncoder, whose model, bert, backend_tokenizer, pad_id, max_length, prompts and
    preprocess it reads. Each job fills save()'s hooks: _st_modules, _transformer_config, _st_config.
    """

    # The hub organization a bare name is looked up in (sentence-transformers' class attribute); None: none.
    default_huggingface_organization: ClassVar[str | None] = None

    model: Any
    bert: Any
    backend_tokenizer: Tokenizer
    pad_id: int
    max_length: int
    prompts: dict[str, str]
    default_prompt_name: str | None
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
        logger.warning("The `tokenize` method is deprecated, please use `preprocess` instead.")
        return self.preprocess(texts, **kwargs)

    @staticmethod
    def is_singular_input(inputs: Any) -> bool:
        """Whether `inputs` is one example (True) or a batch, as sentence-transformers decides: a list, a tuple or
        a numpy array of strings is a batch, anything else (a str) one example; a list of chat messages ({"role",
        "content"} dicts) is one conversation.

        Args:
            inputs: what encode was given.

        Returns:
            True for one example.
        """
        if isinstance(inputs, list) and inputs and isinstance(inputs[0], dict):
            return "role" in inputs[0] and "content" in inputs[0]
        if isinstance(inputs, list | tuple):
            return False
        return not (isinstance(inputs, np.ndarray) and inputs.ndim >= 1 and inputs.dtype.kind in ("U", "O"))

    def _prompt_for(self, task: str, prompt_name: str | None, prompt: str | None) -> str | None:
        """The prompt name encode_query (task "query") or encode_document ("document") uses: the one given, else
        the first of the task's prompts (TASK_PROMPTS) the model has, which wins over the default prompt
        (sentence-transformers' rule)."""
        if prompt_name is not None or prompt is not None:
            return prompt_name
        return next((name for name in TASK_PROMPTS[task] if name in self.prompts), None)

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

    @classmethod
    def _load(
        cls, name_or_path: str | os.PathLike, options: LoadOptions
    ) -> tuple[nn.Module, Tokenizer, dict[str, Any]]:
        """from_pretrained's loading, its options checked: the model, its tokenizer and the folder's settings for
        __init__."""
        raise NotImplementedError

    def _by_name(
        self, model_name_or_path: str | os.PathLike, tokenizer: Tokenizer | None, loading: LoadingKeywords
    ) -> tuple[str, dict[str, Any]]:
        """The constructor given a name: the name resolved as sentence-transformers resolves it (a bare name
        under default_huggingface_organization), and from_pretrained's keywords (device None: default_device()).

        Raises:
            TypeError: a tokenizer given with a name, or a name that is not a str or path.
            ValueError: what LoadingKeywords.from_pretrained_kwargs refuses.
            NotADirectoryError, FileNotFoundError: as resolve_model_name.
        """
        name = type(self).__name__
        if not isinstance(model_name_or_path, str | os.PathLike):
            raise TypeError(
                f"{name} takes a model name or path (sentence-transformers' way), or a model and its tokenizer; "
                f"got {type(model_name_or_path).__name__}"
            )
        if tokenizer is not None:
            raise TypeError(f"{name}({model_name_or_path!r}, tokenizer): the folder's tokenizer is loaded with it")
        resolved = resolve_model_name(model_name_or_path, self.default_huggingface_organization)
        kwargs = loading.from_pretrained_kwargs(resolved)
        logger.info(f"Loading {name} model from {resolved}.")
        if kwargs["device"] is None:
            kwargs["device"] = default_device()
        return resolved, kwargs

    def _load_by_name(
        self, model_name_or_path: str | os.PathLike, tokenizer: Tokenizer | None, loading: LoadingKeywords
    ) -> tuple[nn.Module, Tokenizer, dict[str, Any]]:
        """The constructor given a name (_by_name), loaded as from_pretrained loads it (_load), with
        model_kwargs' attn_implementation set before the job readies the model."""
        resolved, kwargs = self._by_name(model_name_or_path, tokenizer, loading)
        options = LoadOptions.check(None, kwargs.pop("dtype", None), kwargs.pop("device"), False, kwargs)
        model, tokenizer, folder = self._load(resolved, options)
        set_attention(model, loading.model_kwargs)
        return model, tokenizer, folder

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        """The model's parameters, as a sentence-transformers model (an nn.Module) gives them.

        Args:
            recurse: nn.Module.parameters' argument.

        Returns:
            An iterator over the parameters of the model the job runs.
        """
        return self.model.parameters(recurse)

    @property
    def transformers_model(self) -> nn.Module:
        """The model the job runs (bertlite's module tree under transformers' names), as sentence-transformers'
        transformers_model gives its transformers model."""
        return self.model

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
        path: str | None,
        model_name: str | None = None,
        create_model_card: bool = True,
        train_datasets: list[str] | None = None,
        safe_serialization: bool = True,
    ) -> None:
        """Write a folder that sentence-transformers' class of the same kind loads with the same outputs,
        and that this class's from_pretrained loads back.

        The folder: the model (config.json, model.safetensors), the tokenizer (tokenizer.json,
        tokenizer_config.json with max_seq_length as model_max_length), modules.json with the Transformer and
        the job's modules after it (each in its folder), sentence_bert_config.json and
        config_sentence_transformers.json (the model type, prompts and the job's settings).

        Over an earlier save of another model the job files this save does not write go, once everything is
        written (a save that fails midway leaves the old ones): BGE-M3's colbert_linear.pt and sparse_linear.pt,
        the module folders the old modules.json named and the new one does not, a module's weights in the other
        format. Files a save does not write are kept.

        Args:
            path: the folder, created if needed; None: nothing is written.
            model_name, create_model_card, train_datasets: sentence-transformers' model-card options; no
                model card (README.md) is written.
            safe_serialization: model.safetensors; False: pytorch_model.bin.

        Raises:
            ValueError: an int8-quantized model (bertlite does not save int8), a setting no
                sentence-transformers module can say (named by the job), or path is a file.
        """
        if path is None:  # sentence-transformers' save(None) writes nothing
            return
        if is_quantized(self.bert):
            raise ValueError(
                "this model is int8-quantized, which bertlite does not save; load the float32 model to save it "
                "and quantize at load (dtype='int8')"
            )
        st_modules = self._st_modules()
        folder = Path(path)
        old_modules = _module_folders(folder)
        self.model.save_pretrained(folder, safe_serialization=safe_serialization)
        transformers_tokenizer(self.backend_tokenizer, self.max_length, self.pad_id).save_pretrained(folder)
        modules = [{"idx": 0, "name": "0", "path": "", "type": TRANSFORMER_MODULE}]
        written: dict[str, set[str]] = {}  # per module folder, the files this save wrote there
        for idx, (name, kind, config, weights) in enumerate(st_modules, start=1):
            subfolder = folder / f"{idx}_{name}"
            subfolder.mkdir(exist_ok=True)
            _write_json(subfolder / "config.json", config)
            if weights is not None:
                _save_weights(weights, subfolder, safe_serialization)
            written[subfolder.name] = {"config.json"} | ({_weights_name(safe_serialization)} if weights else set())
            modules.append({"idx": idx, "name": str(idx), "path": subfolder.name, "type": kind})
        _write_json(folder / "modules.json", modules)
        _write_json(folder / "sentence_bert_config.json", self._transformer_config())
        _write_json(folder / "config_sentence_transformers.json", self._st_config())
        _remove_stale(folder, old_modules, written)

    save_pretrained = save  # sentence-transformers' other name for save()

    def _st_modules(self) -> list[tuple[str, str, dict[str, Any], nn.Module | None]]:
        """The modules after the Transformer: (folder name, class path, config, module with weights or None)."""
        return []

    def _transformer_config(self) -> dict[str, Any]:
        """sentence_bert_config.json: the Transformer module's settings."""
        return dict(FEATURE_EXTRACTION)

    def _st_config(self) -> dict[str, Any]:
        """config_sentence_transformers.json: the model type, prompts and the job's settings."""
        from bertlite import __version__  # the package's own name, not its lazy table: no import cycle

        return {
            "__version__": {"bertlite": __version__, "pytorch": torch.__version__},
            "model_type": type(self).__name__,
            "prompts": self.prompts,
            "default_prompt_name": self.default_prompt_name,
        }


def check_wrapped(tokenizer: Tokenizer | None, loading: LoadingKeywords) -> None:
    """A job's constructor given a model: its tokenizer is required, and of the loading options only
    `device` applies (the model is moved there).

    Raises:
        TypeError: no tokenizer, or a loading option other than device.
    """
    if tokenizer is None:
        raise TypeError("a model needs its tokenizer: pass (model, tokenizer), or a model name or path")
    if given := loading.given():
        raise TypeError(
            f"{', '.join(given)} load a checkpoint by name; with a model object they do not apply "
            "(load by name, or use from_pretrained)"
        )


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _module_folders(folder: Path) -> set[str]:
    """The module folders (MODULE_FOLDER names) the folder's modules.json names: an earlier save's modules."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    paths = {module.get("path") for module in modules if isinstance(module, dict)} if isinstance(modules, list) else ()
    return {path for path in paths if isinstance(path, str) and MODULE_FOLDER.fullmatch(path)}


def _remove_stale(folder: Path, old_modules: set[str], written: dict[str, set[str]]) -> None:
    """Remove what an earlier save of another model left and this save did not write: BGE-M3's head files
    (which would make the folder read as BGE-M3), the module files of a module folder no longer named (the
    folder too, once empty), and a module's files of the other weight format.

    Args:
        folder: the saved folder.
        old_modules: the module folders the earlier modules.json named.
        written: per module folder of this save, the files it wrote there.
    """
    for name in M3_FILES:
        (folder / name).unlink(missing_ok=True)
    for name in old_modules | set(written):
        subfolder = folder / name
        if not subfolder.is_dir():
            continue
        for file in MODULE_FILES:
            if file not in written.get(name, ()):
                (subfolder / file).unlink(missing_ok=True)
        if name not in written and not any(subfolder.iterdir()):
            subfolder.rmdir()


def _weights_name(safe_serialization: bool) -> str:
    return "model.safetensors" if safe_serialization else "pytorch_model.bin"


def _save_weights(module: nn.Module, folder: Path, safe_serialization: bool) -> None:
    """A module's float tensors as model.safetensors (or pytorch_model.bin), the keys of its state_dict."""
    state = {key: value.detach().contiguous().cpu() for key, value in module.state_dict().items()}
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(state, str(folder / _weights_name(True)))
    else:
        torch.save(state, folder / _weights_name(False))
