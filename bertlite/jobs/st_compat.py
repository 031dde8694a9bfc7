"""sentence-transformers' constructor, mapped onto bertlite's from_pretrained.

`SentenceTransformer("all-MiniLM-L6-v2", device=..., model_kwargs={"dtype": ...})` and the same call on
CrossEncoder, SparseEncoder and MultiVectorEncoder load through the jobs' from_pretrained: the name is
resolved as sentence-transformers 6 resolves it (resolve_model_name), its keywords become bertlite's
(st_load_kwargs). SentenceTransformer itself is bertlite.jobs.sentence_transformer. No sentence-transformers
import.
"""

from __future__ import annotations

import os
from typing import Any

from bertlite.config import FAMILIES

__all__ = [
    "CROSS_ENCODER_ORGANIZATION",
    "ORIGINAL_TRANSFORMER_MODELS",
    "SENTENCE_TRANSFORMERS_ORGANIZATION",
    "SPARSE_ENCODER_ORGANIZATION",
    "resolve_model_name",
    "st_load_kwargs",
]

# The hub organization a bare name is looked up in, per class (sentence-transformers'
# default_huggingface_organization; its MultiVectorEncoder has none).
SENTENCE_TRANSFORMERS_ORGANIZATION = "sentence-transformers"
CROSS_ENCODER_ORGANIZATION = "cross-encoder"
SPARSE_ENCODER_ORGANIZATION = "sparse-encoder"

# Bare names that are transformers' own original checkpoints, never prefixed with an organization
# (sentence_transformers.util.misc.ORIGINAL_TRANSFORMER_MODELS).
ORIGINAL_TRANSFORMER_MODELS = frozenset(
    {
        "albert-base-v1",
        "albert-base-v2",
        "albert-large-v1",
        "albert-large-v2",
        "albert-xlarge-v1",
        "albert-xlarge-v2",
        "albert-xxlarge-v1",
        "albert-xxlarge-v2",
        "bert-base-cased-finetuned-mrpc",
        "bert-base-cased",
        "bert-base-chinese",
        "bert-base-german-cased",
        "bert-base-german-dbmdz-cased",
        "bert-base-german-dbmdz-uncased",
        "bert-base-multilingual-cased",
        "bert-base-multilingual-uncased",
        "bert-base-uncased",
        "bert-large-cased-whole-word-masking-finetuned-squad",
        "bert-large-cased-whole-word-masking",
        "bert-large-cased",
        "bert-large-uncased-whole-word-masking-finetuned-squad",
        "bert-large-uncased-whole-word-masking",
        "bert-large-uncased",
        "camembert-base",
        "ctrl",
        "distilbert-base-cased-distilled-squad",
        "distilbert-base-cased",
        "distilbert-base-german-cased",
        "distilbert-base-multilingual-cased",
        "distilbert-base-uncased-distilled-squad",
        "distilbert-base-uncased-finetuned-sst-2-english",
        "distilbert-base-uncased",
        "distilgpt2",
        "distilroberta-base",
        "gpt2-large",
        "gpt2-medium",
        "gpt2-xl",
        "gpt2",
        "openai-gpt",
        "roberta-base-openai-detector",
        "roberta-base",
        "roberta-large-mnli",
        "roberta-large-openai-detector",
        "roberta-large",
        "t5-11b",
        "t5-3b",
        "t5-base",
        "t5-large",
        "t5-small",
        "transfo-xl-wt103",
        "xlm-clm-ende-1024",
        "xlm-clm-enfr-1024",
        "xlm-mlm-100-1280",
        "xlm-mlm-17-1280",
        "xlm-mlm-en-2048",
        "xlm-mlm-ende-1024",
        "xlm-mlm-enfr-1024",
        "xlm-mlm-enro-1024",
        "xlm-mlm-tlm-xnli15-1024",
        "xlm-mlm-xnli15-1024",
        "xlm-roberta-base",
        "xlm-roberta-large-finetuned-conll02-dutch",
        "xlm-roberta-large-finetuned-conll02-spanish",
        "xlm-roberta-large-finetuned-conll03-english",
        "xlm-roberta-large-finetuned-conll03-german",
        "xlm-roberta-large",
        "xlnet-base-cased",
        "xlnet-large-cased",
    }
)

# model_kwargs keys bertlite reads: the dtype under either of transformers' names, and a device_map that
# names one device.
MODEL_KWARGS = ("dtype", "torch_dtype", "device_map")


def resolve_model_name(
    name_or_path: str | os.PathLike, organization: str | None = SENTENCE_TRANSFORMERS_ORGANIZATION
) -> str:
    """The folder or hub id sentence-transformers 6 loads for `name_or_path`.

    A local folder is itself. Otherwise it is a hub id, and a bare name (no "/") that is not one of
    transformers' original checkpoints is looked up in `organization`: "all-MiniLM-L6-v2" ->
    "sentence-transformers/all-MiniLM-L6-v2".

    Args:
        name_or_path: a local folder, a hub id, or a bare model name.
        organization: the organization of bare names (SENTENCE_TRANSFORMERS_ORGANIZATION,
            CROSS_ENCODER_ORGANIZATION, SPARSE_ENCODER_ORGANIZATION); None: bare names stay bare.

    Returns:
        The folder or hub id, as a str.

    Raises:
        NotADirectoryError: `name_or_path` is a file (sentence-transformers' error).
        FileNotFoundError: a path (more than one "/") that does not exist (sentence-transformers' error).
    """
    name = os.fspath(name_or_path)
    if os.path.isdir(name):
        return name
    if os.path.isfile(name):
        raise NotADirectoryError(
            f"Path {name} is a file, not a directory. `model_name_or_path` must be a local directory "
            "containing a model, or a Hugging Face Hub model ID."
        )
    if (os.sep == "\\" and "\\" in name) or name.count("/") > 1:
        raise FileNotFoundError(f"Path {name} not found")
    if organization is not None and "/" not in name and name.lower() not in ORIGINAL_TRANSFORMER_MODELS:
        return f"{organization}/{name}"
    return name


def st_load_kwargs(
    *,
    device: Any = None,
    trust_remote_code: bool = False,
    cache_folder: str | os.PathLike | None = None,
    revision: str | None = None,
    local_files_only: bool = False,
    token: bool | str | None = None,
    model_kwargs: dict[str, Any] | None = None,
    processor_kwargs: dict[str, Any] | None = None,
    config_kwargs: dict[str, Any] | None = None,
    use_kernels: bool = False,
    kernel_config: Any = None,
    backend: str = "torch",
) -> dict[str, Any]:
    """sentence-transformers' constructor keywords as the keywords of a bertlite job's from_pretrained.

    Args:
        device: where the model runs; passed on as `device` (None: from_pretrained's default, the CPU).
        trust_remote_code: must be False: bertlite runs no code from a checkpoint.
        cache_folder: the hub cache, as `cache_dir`; None: $SENTENCE_TRANSFORMERS_HOME if set (as
            sentence-transformers reads it), else huggingface_hub's default.
        revision, local_files_only, token: hub options, passed on under the same names.
        model_kwargs: "dtype" or "torch_dtype" (unset: float32; a torch dtype, its name or "auto": bertlite's
            "auto", chosen for this machine, not config.json's dtype), and "device_map" naming one device (it wins
            over `device`, as in sentence-transformers). Other keys are refused.
        processor_kwargs, config_kwargs: must be empty: bertlite reads the tokenizer and config as saved.
        use_kernels, kernel_config: must be off: bertlite chooses its kernels itself.
        backend: must be "torch".

    Returns:
        The keywords: device, revision, cache_dir, local_files_only, token, and dtype when model_kwargs
        gives one (else from_pretrained's default applies).

    Raises:
        ValueError: trust_remote_code=True, an option bertlite does not have, or model_kwargs with a key
            it does not read, naming what to do instead.
    """
    _refuse_unsupported(trust_remote_code, backend, use_kernels or kernel_config is not None)
    for name, extra in (("processor_kwargs", processor_kwargs), ("config_kwargs", config_kwargs)):
        if extra:
            raise ValueError(
                f"{name}={extra!r}: bertlite reads the checkpoint's tokenizer and config as saved and takes no "
                f"{name}; leave it unset"
            )
    model_kwargs = dict(model_kwargs or {})
    unknown = sorted(set(model_kwargs) - set(MODEL_KWARGS))
    if unknown:
        raise ValueError(
            f"model_kwargs {unknown} are not read by bertlite; it reads only {list(MODEL_KWARGS)} "
            "(attention is chosen for the device: see docs/migration.md)"
        )
    if "dtype" in model_kwargs and "torch_dtype" in model_kwargs:
        raise ValueError("model_kwargs gives both 'dtype' and 'torch_dtype'; give one ('dtype')")
    if cache_folder is None:
        cache_folder = os.getenv("SENTENCE_TRANSFORMERS_HOME")
    device_map = model_kwargs.get("device_map")
    if device_map is not None:
        if not isinstance(device_map, str) or device_map in ("auto", "balanced", "balanced_low_0", "sequential"):
            raise ValueError(
                f"model_kwargs device_map={device_map!r}: bertlite runs a model on one device; give that device "
                "(device='cuda:1' or device_map='cuda:1')"
            )
        device = device_map
    kwargs: dict[str, Any] = {
        "device": device,
        "revision": revision,
        "cache_dir": cache_folder,
        "local_files_only": local_files_only,
        "token": token,
    }
    for key in ("dtype", "torch_dtype"):
        if key in model_kwargs:
            kwargs["dtype"] = model_kwargs[key]
    return kwargs


def _refuse_unsupported(trust_remote_code: bool, backend: str, kernels: bool) -> None:
    """Raise ValueError for the sentence-transformers options bertlite has no counterpart of."""
    if trust_remote_code:
        raise ValueError(
            "trust_remote_code=True: bertlite runs no code from a checkpoint, only the BERT-family models it "
            f"implements ({', '.join(FAMILIES)}); leave trust_remote_code=False, or use "
            "sentence-transformers for this model"
        )
    if backend != "torch":
        raise ValueError(f"backend={backend!r}: bertlite runs on torch only; use backend='torch'")
    if kernels:
        raise ValueError("use_kernels/kernel_config: bertlite chooses its own kernels; leave them unset")
