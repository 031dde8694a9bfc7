"""--isa NAME: run a job like a CPU with less than this one, by re-executing it under the libraries' ISA caps.

The caps are bertlite.utils.capabilities.EMULATED_CPUS' (oneDNN, ATen, MKL, fbgemm) plus CTranslate2's own;
ONNX Runtime and OpenVINO have none, so their numbers stay this CPU's full ISA and the result says so.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.common import ROOT, add_model_and_json_arguments
from bertlite.utils.capabilities import EMULATED_CPUS, ISA_VARIABLES, Capabilities, resolve_dtype

# CTranslate2 reads CT2_FORCE_CPU_ISA (it raises where the CPU lacks the ISA).
PEER_ISA_VARIABLES = {
    "avx2": {"CT2_FORCE_CPU_ISA": "AVX2"},
    "avx512_vnni": {"CT2_FORCE_CPU_ISA": "AVX512"},
    "avx512_bf16": {"CT2_FORCE_CPU_ISA": "AVX512"},
}
NOT_CAPPED = {
    "onnxruntime_fp32_fused_sorted": "ONNX Runtime's MLAS kernels have no ISA cap",
    "onnxruntime_int8_per_channel_sorted": "ONNX Runtime's MLAS kernels have no ISA cap",
    "openvino_fp32_sorted": "OpenVINO runs fp32 Linears on its MLAS (gemm_mlas_f32), which has no ISA cap",
    "openvino_default_sorted": "OpenVINO's CPU plugin detects the ISA itself; the bench sets no cap for it",
}


def emulate(isa: str, argv: list[str]) -> dict[str, Any]:
    """Make this process run like the smaller CPU EMULATED_CPUS[isa]: if its ISA caps are not what
    this process started with, re-execute `python -m bench *argv` with them (each library reads its cap
    once, at its first use; only a fresh process is sure to start under them).

    Args:
        isa: a key of EMULATED_CPUS.
        argv: the arguments after `python -m bench`, the job's name first.

    Returns:
        The record of the emulation for the result's capabilities (in the re-executed process).
    """
    variables = EMULATED_CPUS[isa][0] | PEER_ISA_VARIABLES[isa]
    names = [*ISA_VARIABLES, *PEER_ISA_VARIABLES[isa]]
    # Inductor's cache does not key on ATEN_CPU_CAPABILITY: kernels an uncapped run cached would come back
    # (bertlite.quant.compiled's check would then keep the eager ops), so each emulated ISA gets its own
    # unless one is set.
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(Path(tempfile.gettempdir()) / f"bertlite-inductor-{isa}")}
    cache = {name: os.environ.get(name, value) for name, value in cache.items()}
    if any(os.environ.get(name) != variables.get(name) for name in names) or any(
        os.environ.get(name) != value for name, value in cache.items()
    ):
        env = {name: value for name, value in os.environ.items() if name not in names} | variables | cache
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "bench", *argv], env)
    return {
        "isa": isa,
        "emulates": EMULATED_CPUS[isa][1],
        "variables": variables,
        "caps": {name: ISA_VARIABLES.get(name, "CTranslate2's own kernels") for name in variables},
        "inductor_cache_dir": cache["TORCHINDUCTOR_CACHE_DIR"],
        "not_capped": NOT_CAPPED,
        # what torch itself reports under the caps: evidence they took effect in this process
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_mkldnn_bf16_supported": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "note": "an emulation: this machine's cores, caches and memory with a smaller ISA, not a real such CPU",
    }


def banner(capabilities: Capabilities, emulated: dict[str, Any] | None) -> str:
    """The first lines of a result: the CPU's capabilities, and under --isa that they are emulated.

    Args:
        capabilities: bertlite.utils.capabilities.detect().
        emulated: emulate()'s record, or None.

    Returns:
        One line, two under --isa.
    """
    line = f"CPU: {capabilities.summary()}; dtype='auto' is {str(resolve_dtype('auto')).removeprefix('torch.')}"
    if emulated is None:
        return line
    caps = " ".join(f"{name}={value}" for name, value in emulated["variables"].items())
    return f"EMULATED CPU (--isa {emulated['isa']}): {emulated['emulates']}, by {caps}; {emulated['note']}\n{line}"


def add_start_arguments(parser: Any) -> None:
    """Add the flags start() reads to a job's argparse parser: --isa, then --model and --json."""
    parser.add_argument(
        "--isa",
        choices=sorted(EMULATED_CPUS),
        help="emulate a CPU with less: re-run under the libraries' ISA caps "
        "(bertlite.utils.capabilities.EMULATED_CPUS); the result's capabilities record it",
    )
    add_model_and_json_arguments(parser)


def start(args: Any, packages: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """The start of a job that takes --isa and --model: re-execute under the caps if asked, print the banner.

    Args:
        args: the job's parsed arguments (isa, model, argv: the arguments after `python -m bench`).
        packages: more packages whose versions the environment record lists.

    Returns:
        The model path (args.model, else the packaged checkpoint) and bench.common.environment()'s record.
    """
    from bench.common import default_model_path, environment
    from bertlite.utils.capabilities import detect

    emulated = emulate(args.isa, args.argv) if args.isa else None
    model_path = args.model or default_model_path()
    print(banner(detect(), emulated))
    return model_path, environment(model_path, packages, emulated)
