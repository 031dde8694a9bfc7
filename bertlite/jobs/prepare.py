"""Readying a model for inference, in one place: its dtype, its device's kernels, int8.

Every job goes through here twice. Its from_pretrained checks the options (LoadOptions.check) and loads
through LoadOptions.load: the dtype resolved for the device, the model loaded in it (int8: in float32,
quantized once the job can hold it to its bar, BaseEncoder.settle_auto). Its constructor calls `ready`: the
device's fast modules installed once, when the job is built, so no call chooses a kernel by what came before
it. `bertlite serve` and `bertlite embed` also build int8's compiled input quantization before loading
(bertlite.quant.compiled), for the same reason.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from tokenizers import Tokenizer
from torch import nn

from bertlite.config import BertConfig
from bertlite.layers import native_attention
from bertlite.layers.attention import packed_per_sequence_attention, packed_varlen_attention
from bertlite.layers.onednn import FusedQKV, fast_linear, optimize, restore
from bertlite.layers.roles import attention_of, model_layers, part, roles_of
from bertlite.models.auto import BASE_MODELS, AutoModel, read_model_type
from bertlite.models.bert import BertModel
from bertlite.quant.int8 import is_quantized
from bertlite.tokenization import load_tokenizer
from bertlite.utils.auto_dtype import Verdict, auto_dtype
from bertlite.utils.capabilities import detect, resolve_dtype
from bertlite.utils.warn import warn_user

__all__ = [
    "AUTO_VERDICTS",
    "BF16_COMPUTE",
    "INT8_PENDING",
    "LoadOptions",
    "check_device",
    "check_precision",
    "packed_attention_for",
    "ready",
    "unready",
]

M = TypeVar("M", bound=nn.Module)

# dtype="auto" on the CPU: the CPU's verdict for each model loaded in float32, until its job settles it.
AUTO_VERDICTS: weakref.WeakKeyDictionary[nn.Module, Verdict] = weakref.WeakKeyDictionary()
# dtype="bfloat16" on the CPU: models loaded in float32 whose job runs their GEMMs on bf16 inputs (ready's compute).
BF16_COMPUTE: weakref.WeakSet[nn.Module] = weakref.WeakSet()
# dtype="int8": models loaded in float32 with the tokenizer that calibrates them, until their job quantizes them.
INT8_PENDING: weakref.WeakKeyDictionary[nn.Module, Tokenizer] = weakref.WeakKeyDictionary()


def check_precision(dtype: torch.dtype | str | None, quantize: str | None) -> bool:
    """Check a job's dtype, with the deprecated quantize= spelling of int8.

    Args:
        dtype: "auto", None, a float dtype or its name, or "int8".
        quantize: None, or "int8" (deprecated: dtype="int8" is the one spelling; a FutureWarning).

    Returns:
        Whether the options ask for int8.

    Raises:
        ValueError: an unknown quantize, or quantize="int8" with a dtype other than float32 or "auto".
    """
    if quantize is None:
        return dtype == "int8"
    if quantize != "int8":
        raise ValueError(f"quantize={quantize!r} is not supported; int8 is dtype='int8'")
    if dtype not in (None, "auto", "int8", "float32", torch.float32):
        raise ValueError(f"quantize='int8' quantizes the float32 weights; dtype={dtype!r} cannot go with it")
    warn_user("quantize='int8' is deprecated and will be removed; use dtype='int8'", FutureWarning)
    return True


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


@dataclass
class LoadOptions:
    """A job's from_pretrained options for its model, checked (LoadOptions.check), and the load they ask for (load).

    The sequence every job shares: check the dtype and the device; then, once the job has read what it
    needs of the folder, resolve the dtype, load the model and the tokenizer, and quantize to int8.
    """

    dtype: torch.dtype | str | None  # as the job was given it; "int8" asks for int8 too
    int8: bool
    device: torch.device | None
    allow_nonfinite: bool
    hub_kwargs: dict[str, Any]

    @classmethod
    def check(
        cls,
        quantize: str | None,
        dtype: torch.dtype | str | None,
        device: torch.device | str | None,
        allow_nonfinite: bool,
        hub_kwargs: dict[str, Any],
    ) -> LoadOptions:
        """A job's from_pretrained arguments of the same names, checked.

        Raises:
            ValueError: an unknown quantize, quantize="int8" with a dtype other than float32 or "auto"
                (check_precision), a device this machine cannot use (check_device), int8 off the CPU.
        """
        int8 = check_precision(dtype, quantize)
        resolved = check_device(device)
        if int8 and resolved is not None and resolved.type != "cpu":
            raise ValueError(
                f"dtype='int8' runs on the CPU only (its kernels are oneDNN's); on device={device!r} use "
                "dtype='auto' (bfloat16 or float16 there)"
            )
        return cls(dtype, int8, resolved, allow_nonfinite, hub_kwargs)

    def load(
        self,
        loader: Callable[..., M],
        name_or_path: str | os.PathLike,
        config: BertConfig | None = None,
        **model_kwargs: Any,
    ) -> tuple[M, Tokenizer]:
        """The model, loaded in the resolved dtype on the device, and its tokenizer; int8 quantizes it.

        A job that loads a BertModel gets its family's base model for a RoBERTa, XLM-RoBERTa or CamemBERT
        checkpoint (bertlite.models.roberta), by config.json's model_type.

        Args:
            loader: the model class's from_pretrained, or a function with its keywords that also checks the
                loaded model (and returns it alone).
            name_or_path: a local checkpoint folder or a hub id.
            config: the checkpoint's config, when the job has read it; None: read by `loader`.
            **model_kwargs: the model's constructor arguments (add_pooling_layer).

        Returns:
            (model, tokenizer); int8 loads float32 and keeps the tokenizer in INT8_PENDING, for the job to quantize
            the model (bertlite.quant.int8.quantize_int8) and hold it to its bar. "auto" on the CPU loads float32
            and keeps the CPU's verdict in AUTO_VERDICTS, for the job to hold bfloat16 to its bar
            (BaseEncoder.settle_auto); "bfloat16" on the CPU loads float32 and puts the model in BF16_COMPUTE, for
            the job to run its GEMMs on bf16 inputs and the rest in float32 (ready's compute).

        Raises:
            ValueError: an unknown dtype.
            CheckpointError: config.json or the weights missing, corrupt or not fitting (from `loader`).
            FileNotFoundError: no tokenizer files (load_tokenizer).
        """
        model_type = config.model_type if config is not None else read_model_type(name_or_path, self.hub_kwargs)
        if getattr(loader, "__self__", None) is BertModel and model_type in BASE_MODELS and model_type != "bert":
            loader = AutoModel.model_class(model_type).from_pretrained  # the family's base model
        verdict, on_cpu = None, self.device is None or self.device.type == "cpu"
        if self.dtype == "auto" and not self.int8 and on_cpu:
            # The job holds a bfloat16 candidate to its bar (BaseEncoder.settle_auto), so it loads float32 first.
            verdict = auto_dtype(detect())
        dtype = torch.float32 if verdict is not None else resolve_dtype(None if self.int8 else self.dtype, self.device)
        bf16_compute = on_cpu and dtype == torch.bfloat16
        dtype = torch.float32 if bf16_compute else dtype  # float32 Parameters, bf16 GEMM inputs (ready's compute)
        model = loader(
            name_or_path,
            config=config,
            dtype=dtype,
            device=self.device,
            allow_nonfinite=self.allow_nonfinite,
            **model_kwargs,
            **self.hub_kwargs,
        )
        if verdict is not None:
            AUTO_VERDICTS[model] = verdict
        if bf16_compute:
            BF16_COMPUTE.add(model)
        tokenizer = load_tokenizer(name_or_path, **self.hub_kwargs)
        if self.int8:
            INT8_PENDING[model] = tokenizer
        return model, tokenizer


def unready(model: nn.Module) -> None:
    """Undo `ready`, in place: the plain modules back (bertlite.layers.onednn.restore) and each layer's attention
    "sdpa" again where ready chose it for the device, so the model can move or be cast and be readied again."""
    restore(model)
    for layer in model_layers(model):
        attention = attention_of(layer)  # BERT's attention.self, DistilBERT's attention (layers.roles)
        if attention.attn_implementation in ("auto", "varlen"):  # set by ready for a device
            attention.attn_implementation = "sdpa"


def ready(model: M, pack_weights: bool = True, compute: torch.dtype | None = None) -> M:
    """Put a model in eval mode with its device's fast inference modules, in place, and return it.

    On the CPU: oneDNN's Linears and attention "auto" (one SDPA call per text), or in a fast mode (bf16 compute or
    dtype, int8) the C++ attention "varlen" where it builds and times faster here (bertlite.layers.onednn .optimize,
    bertlite.layers.native_attention), and oneDNN's Linear for a masked-LM head's vocabulary projection, which costs
    as much as the whole encoder on every token of a SPLADE model. Elsewhere (CUDA): query|key|value as one GEMM
    (FusedQKV) and, on CUDA, attention "varlen" where it runs (packed_attention_for). A model whose attention is
    "eager", the reference, is left as it is.

    Args:
        model: a BertModel, or a head whose base model is `model.base_model`.
        pack_weights: keep float32 CPU weights in oneDNN's blocked layout (faster, one more copy of them).
        compute: torch.bfloat16 on the CPU: a float32 model's GEMMs take bf16 inputs, the rest stays float32
            (bertlite.layers.onednn.optimize); None: the model computes in its own dtype.

    Returns:
        The model.
    """
    model.eval()
    bert: BertModel = model if isinstance(model, BertModel) else model.base_model
    if bert.attn_implementation == "eager":
        return model
    if bert.device.type == "cpu":
        # A fast mode (bf16 compute or dtype, int8) runs the C++ attention, where it builds, checks and times faster
        # here (built once per machine, loaded in well under a second after that); float32 keeps one SDPA call
        # per text, transformers' numbers within 1e-5 at any length.
        fast = compute is not None or bert.dtype in (torch.bfloat16, torch.float16) or is_quantized(model)
        if fast:
            native_attention.build()
        optimize(model, pack_weights=pack_weights, compute=compute, native=fast)
        # BERT's masked-LM head (cls.predictions) or RoBERTa's (lm_head); DistilBERT's projection is vocab_projector,
        # ELECTRA's generator_lm_head, ModernBERT's decoder.
        head = getattr(getattr(model, "cls", None), "predictions", None) or getattr(model, "lm_head", None)
        if isinstance(getattr(head, "decoder", None), nn.Linear):
            head.decoder = fast_linear(head.decoder, pack_weights, compute)
        for name in ("vocab_projector", "generator_lm_head", "decoder"):
            if isinstance(getattr(model, name, None), nn.Linear):
                setattr(model, name, fast_linear(getattr(model, name), pack_weights, compute))
        return model
    head_size = bert.config.hidden_size // bert.config.num_attention_heads
    attention = packed_attention_for(bert.device, bert.dtype, head_size)
    for layer in model_layers(bert):
        self_attention = attention_of(layer)  # found by the layer's roles (bertlite.layers.roles)
        linears = () if roles_of(layer).qkv else tuple(part(layer, role) for role in ("query", "key", "value"))
        fusable = all(type(m) is nn.Linear for m in linears) and len({m.bias is None for m in linears}) == 1
        if linears and self_attention.qkv is None and fusable:
            self_attention.qkv = FusedQKV(*linears)  # one GEMM, not three and a concatenation
        if attention is not None:
            self_attention.attn_implementation = attention
    return model


@functools.cache
def packed_attention_for(device: torch.device, dtype: torch.dtype, head_size: int) -> str | None:
    """The packed attention to install on a GPU: "varlen" where one call of it runs here, else None
    (the model keeps its own, "sdpa" on a padded grid).

    Tried once per device, dtype and head size: flash attention needs CUDA, bf16/fp16, a GPU it supports.

    Args:
        device: the model's device.
        dtype: the model's dtype.
        head_size: hidden_size // num_attention_heads.

    Returns:
        "varlen" or None.
    """
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return None
    from bertlite.layers.packing import PackedLayout

    layout = PackedLayout.from_lengths(torch.tensor([3, 2]), dtype, device=device)
    qkv = torch.randn(5, 3 * 2 * head_size, dtype=dtype, device=device)
    try:
        context, _ = packed_varlen_attention(qkv, layout, 2, head_size**-0.5, 0.0)
    except (RuntimeError, ImportError, TypeError, ValueError) as e:
        warn_user(f"varlen attention does not run here ({type(e).__name__}: {e}); using sdpa on a padded grid")
        return None
    expected, _ = packed_per_sequence_attention(qkv.float(), layout, 2, head_size**-0.5, 0.0)
    if not torch.allclose(context.float(), expected, atol=2e-2, rtol=2e-2):
        warn_user("varlen attention gave other numbers than sdpa here; using sdpa on a padded grid")
        return None
    return "varlen"
