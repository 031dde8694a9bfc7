"""What this machine's CPU runs natively, probed once, and the dtype `dtype="auto"` picks from it.

bfloat16 can be fast only where the CPU has it natively, and keeps its vectors close to float32's
(tests/utils/test_capabilities.py checks it on the corpus); without it torch emulates bf16 GEMMs and
they run several times slower than float32. Where native bf16 is faster than float32 was measured per
kind of CPU, and "auto" follows that rule (bertlite.utils.auto_dtype). An explicit bf16 or fp16 on a
CPU without native support warns once.
Importing this module does not import torch.

A process can also be told to use less of its CPU than it has: each kernel library honours an
environment variable that caps its instruction set (ISA_VARIABLES). detect() reads them, records
those set (Capabilities.isa_limits: the numbers are then an emulation, not this CPU's own speed),
and reports bf16 not native where one caps a library below native bf16. EMULATED_CPUS holds the
sets `python -m bench throughput --isa` uses to measure, on an AVX-512/AMX machine, a CPU that has less.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bertlite.errors import SlowDtypeWarning
from bertlite.utils.warn import warn_user

if TYPE_CHECKING:
    import torch

# The /proc/cpuinfo flags that decide which GEMM kernels run: AVX2 (the floor of torch's fast paths),
# AVX-512, native bf16 / fp16 arithmetic, int8 dot products (VNNI) and the AMX tile units.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")

# The ISA caps each library honours, read once by the library at its first use (not at `import torch`;
# checked with torch 2.13): set after a first matmul they are silently ignored, so set them before the
# process starts. Values: oneDNN's dispatcher-control names, ATen's `ATEN_CPU_CAPABILITY` (matched
# exactly: torch ignores "AVX2"), MKL's `MKL_ENABLE_INSTRUCTIONS` names, fbgemm's own.
ISA_VARIABLES = {
    "ONEDNN_MAX_CPU_ISA": "oneDNN: F.linear / mkldnn._linear_pointwise GEMMs in bf16, fp32 and int8",
    "DNNL_MAX_CPU_ISA": "oneDNN (its older name)",
    "ATEN_CPU_CAPABILITY": "ATen's vectorized kernels: softmax, LayerNorm, GELU, the bf16 fallback GEMM",
    "MKL_ENABLE_INSTRUCTIONS": "MKL: float32 matmul (sgemm)",
    "FBGEMM_ENABLE_INSTRUCTIONS": "fbgemm: int8 Linear of torch.ao (the fbgemm / x86 quantized engine)",
}
# The values that leave a library below native bf16: oneDNN capped under AVX512_CORE_BF16 (torch's own
# probe still says bf16 at AVX512_CORE / AVX512_CORE_VNNI; at the latter its bf16 GEMM ran 4-5x slower
# than float32 here), the others capped below AVX-512 (the process then runs like an AVX2-only CPU,
# which has no native bf16).
_ONEDNN_NO_BF16 = frozenset(("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"))
_NO_BF16 = {
    "ONEDNN_MAX_CPU_ISA": _ONEDNN_NO_BF16,
    "DNNL_MAX_CPU_ISA": _ONEDNN_NO_BF16,
    "MKL_ENABLE_INSTRUCTIONS": frozenset(("SSE4_2", "AVX", "AVX2", "AVX2_E1")),
    "FBGEMM_ENABLE_INSTRUCTIONS": frozenset(("AVX2",)),
}

# python -m bench throughput --isa NAME: what this machine runs like with these set. An emulation: the ISA of the
# smaller CPU on this one's cores, caches and memory, so ratios carry over better than absolute speeds.
EMULATED_CPUS: dict[str, tuple[dict[str, str], str]] = {
    "avx2": (
        {
            "ONEDNN_MAX_CPU_ISA": "AVX2",
            "ATEN_CPU_CAPABILITY": "avx2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
        },
        "AVX2 + FMA without AVX-512, VNNI or native bf16 (issue 15's cloud CPU)",
    ),
    "avx512_vnni": (
        {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "MKL_ENABLE_INSTRUCTIONS": "AVX512_E1"},
        "AVX-512 with VNNI, without bf16 (Cascade Lake / Ice Lake)",
    ),
    "avx512_bf16": (
        {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "MKL_ENABLE_INSTRUCTIONS": "AVX512_E3"},
        "AVX-512 with bf16, without AMX (Cooper Lake; Zen 4's ISA)",
    ),
}

# bertlite bf16 vs fp32, 1,000 corpus texts, on two 2-core AVX2 CPUs without native bf16: issue 15's
# (0.20x) and an AMD EPYC Zen 3 (0.16x, bench/results/real_avx2.json).
BF16_EMULATED_SLOWDOWN = "5-6"


DTYPE_NAMES = ("float32", "bfloat16", "float16")  # the dtypes a command runs the model in (and parity compares)
# The --dtype of `bertlite embed` and `bertlite serve`.
DTYPE_CHOICES = ["auto", *DTYPE_NAMES]
DTYPE_HELP = (
    "model dtype (default: float32, the reference's numbers; auto = the fastest that keeps the job's accuracy bar "
    "here, bfloat16 or float32, and `bertlite env` says which); "
    "bfloat16/float16 on a CPU without native support run several times slower than float32"
)


@dataclass(frozen=True)
class Capabilities:
    """What torch and /proc/cpuinfo report about this machine's CPU."""

    cpu_capability: str  # torch.backends.cpu.get_cpu_capability(): the vector ISA torch's kernels use (AVX2, AVX512...)
    bf16_native: bool  # torch.ops.mkldnn._is_mkldnn_bf16_supported(): oneDNN runs bf16 GEMMs in hardware
    fp16_native: bool  # torch.ops.mkldnn._is_mkldnn_fp16_supported(), False where torch lacks the probe
    model_name: str | None  # /proc/cpuinfo "model name", else platform.processor(); None when neither says
    flags: tuple[str, ...] | None  # the CPU_FLAGS this CPU has; None when /proc/cpuinfo is unreadable
    isa_limits: tuple[str, ...] = ()  # the ISA_VARIABLES set, "NAME=value": the process runs less than the CPU has

    def as_dict(self) -> dict[str, Any]:
        """These capabilities as a JSON-ready dict, for `bertlite env --json` and benchmark results.

        Returns:
            The dataclass fields by name, with `flags` and `isa_limits` as lists (`flags` None when
            /proc/cpuinfo was unreadable).
        """
        data = asdict(self)
        data["flags"] = None if self.flags is None else list(self.flags)
        data["isa_limits"] = list(self.isa_limits)
        return data

    def summary(self) -> str:
        """These capabilities as one line of text.

        Returns:
            E.g. 'Intel Xeon; torch AVX512; bf16 native, fp16 native; flags avx2 avx512f ...', with the
            ISA limits appended when any are set.
        """
        flags = "unknown (no /proc/cpuinfo)" if self.flags is None else " ".join(self.flags) or "none listed"
        restricted = (
            f"; ISA restricted by {' '.join(self.isa_limits)} (emulated: not this CPU's own speed)"
            if self.isa_limits
            else ""
        )
        return (
            f"{self.model_name or 'unknown CPU'}; torch {self.cpu_capability}; "
            f"bf16 {'native' if self.bf16_native else 'not native'}, "
            f"fp16 {'native' if self.fp16_native else 'not native'}; flags {flags}{restricted}"
        )


@functools.cache
def detect() -> Capabilities:
    """Probe what this machine's CPU runs natively.

    Probed on the first call and cached, with the ISA_VARIABLES set at that time: bf16 and fp16
    count as not native where one of them caps a library below native bf16.

    Returns:
        This machine's Capabilities.
    """
    import torch

    fp16_probe = getattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", None)
    model_name, flags = _read_cpuinfo()
    limits = {name: os.environ[name] for name in ISA_VARIABLES if os.environ.get(name)}
    restricted = any(_below_bf16(name, value) for name, value in limits.items())
    return Capabilities(
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        bf16_native=_probe(torch.ops.mkldnn._is_mkldnn_bf16_supported) and _has_bf16_dot(flags) and not restricted,
        fp16_native=_probe(fp16_probe) and not restricted,
        model_name=model_name or platform.processor() or None,
        flags=flags,
        isa_limits=tuple(f"{name}={value}" for name, value in limits.items()),
    )


def _below_bf16(name: str, value: str) -> bool:
    if name == "ATEN_CPU_CAPABILITY":
        return value in ("avx2", "default")  # torch matches these exactly and ignores any other spelling
    return value.strip().upper() in _NO_BF16[name]


def _has_bf16_dot(flags: tuple[str, ...] | None, machine: str | None = None) -> bool:
    # torch's probe says bf16 on any AVX-512 CPU, but without bf16 dot products (AVX512_BF16 / AMX:
    # Skylake-SP to Ice Lake) oneDNN converts to float32 and its bf16 GEMM ran 4-5x slower than float32
    # (ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI here). Only x86 flags tell; elsewhere trust the probe.
    if flags is None or (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return True
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _probe(fn: Any) -> bool:
    # A torch built without oneDNN has the op but raises when called; treat that as "not native".
    try:
        return bool(fn()) if fn is not None else False
    except RuntimeError:
        return False


def _read_cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str | None, tuple[str, ...] | None]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None, None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:  # the first processor's entry; the others repeat it
            fields[key.strip()] = value.strip()
    present = set(fields.get("flags", fields.get("Features", "")).split())
    return fields.get("model name") or None, tuple(flag for flag in CPU_FLAGS if flag in present)


_warned: set[str] = set()


def resolve_dtype(
    dtype: torch.dtype | str | None,
    device: torch.device | str | None = None,
) -> torch.dtype:
    """Resolve the dtype Embedder loads a model in.

    Args:
        dtype: "auto": on CPU bfloat16 on the kinds of CPU where it was measured faster than float32
            (bertlite.utils.auto_dtype), else float32; on CUDA bfloat16 or float16
            (accelerator_dtype); on any other device float32. None: float32. A torch dtype or its name ("bfloat16",
            "torch.float16"...): as given; bfloat16 or float16 on a CPU without native support runs,
            with a SlowDtypeWarning once per process and dtype.
        device: the device the model will run on; None means CPU.

    Returns:
        The torch dtype to load the model in.

    Raises:
        ValueError: `dtype` is not float32, bfloat16, float16, float64 (or an alias) or "auto".
    """
    import torch

    from bertlite.utils.dtypes import parse_dtype

    on_cpu = device is None or torch.device(device).type == "cpu"
    if dtype == "auto":
        if not on_cpu:
            return accelerator_dtype(torch.device(device))
        from bertlite.utils.auto_dtype import auto_dtype

        picked = getattr(torch, auto_dtype(detect()).dtype)
        _warn_if_emulated(picked)  # only a forced verdict can pick an emulated dtype
        return picked
    resolved = parse_dtype(dtype) or torch.float32
    if on_cpu:
        _warn_if_emulated(resolved)
    return resolved


# CUDA compute capability from which bf16 runs on the tensor cores (Ampere); older GPUs have fp16 ones only.
BF16_CUDA_CAPABILITY = (8, 0)


def accelerator_dtype(device: torch.device) -> torch.dtype:
    """What dtype="auto" runs in on a device other than the CPU.

    Args:
        device: the device.

    Returns:
        On CUDA bfloat16 where the GPU computes in it natively (compute capability 8.0 and up), else float16;
        float32 elsewhere (MPS and others, unmeasured).
    """
    import torch

    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.get_device_capability(device) >= BF16_CUDA_CAPABILITY else torch.float16


def _warn_if_emulated(dtype: torch.dtype) -> None:
    import torch

    caps = detect()
    native = {torch.bfloat16: caps.bf16_native, torch.float16: caps.fp16_native}.get(dtype, True)
    name = str(dtype).removeprefix("torch.")
    if native or name in _warned:
        return
    _warned.add(name)
    measured = (
        f"measured {BF16_EMULATED_SLOWDOWN}x slower than float32 on two AVX2 CPUs"
        if dtype == torch.bfloat16
        else f"not measured; bfloat16 without native support ran {BF16_EMULATED_SLOWDOWN}x slower than float32"
    )
    where = caps.cpu_capability + (f", ISA restricted by {' '.join(caps.isa_limits)}" if caps.isa_limits else "")
    warn_user(
        f"dtype={name}: this CPU ({where}) has no native {name} GEMMs, so torch emulates them "
        f"and it runs several times slower than float32 ({measured}); dtype='auto' picks float32 here",
        SlowDtypeWarning,
    )
