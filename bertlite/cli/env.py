"""`bertlite env`: versions, this CPU's capabilities, and what dtype='auto' and 'int8' pick here."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from bertlite import __version__

BERT_BASE_SIZES = (768, 3072)  # hidden and intermediate sizes the report times when no model is named

if TYPE_CHECKING:  # run imports them on use, as `bertlite --help` needs none of them
    from bertlite.utils.auto_dtype import Verdict
    from bertlite.utils.capabilities import Capabilities


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "env",
        help="show versions, what this CPU runs natively, and what --dtype auto picks",
        description="Print the versions of bertlite, torch, tokenizers and Python; this CPU's capabilities "
        "(torch's vector ISA, native bf16/fp16 GEMMs, AVX-512 / VNNI / AMX flags from /proc/cpuinfo, and any ISA "
        "cap set in the environment, such as ONEDNN_MAX_CPU_ISA=AVX2, which makes this an emulated smaller CPU); "
        "the dtype that dtype='auto' (asked for: the default is float32) resolves to on this kind of CPU "
        "and why (a rule of the CPU's kind, never a timing, so every process on this CPU picks the same; each job "
        "then keeps bfloat16 only where it meets the job's accuracy bar); the int8 kernel and "
        "integer ranges that dtype='int8' gets here (probed); whether the jobs run the C++ attention here (built, "
        "checked and timed); whether GELU runs inside the GEMM here (timed); and "
        "which GEMM, oneDNN's or MKL's, runs each float32 Linear shape of BERT-base here (timed by the same rule). "
        "Exit status 0; 2 when BERTLITE_AUTO_DTYPE is not float32 or bfloat16.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    """Print the report, as text or (--json) one JSON object.

    Args:
        args: `bertlite env`'s arguments.

    Returns:
        The exit status: 0, or 2 when BERTLITE_AUTO_DTYPE is not float32 or bfloat16.
    """
    import json
    import sys

    from bertlite.utils.auto_dtype import auto_dtype
    from bertlite.utils.capabilities import detect

    caps = detect()
    try:
        verdict = auto_dtype(caps)
    except ValueError as e:  # a bad BERTLITE_AUTO_DTYPE
        print(f"bertlite env: error: {e}", file=sys.stderr)
        return 2
    report = _report(caps, verdict)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print_report(report, caps, verdict)
    return 0


def _report(caps: Capabilities, verdict: Verdict) -> dict[str, Any]:
    """Gather what `bertlite env` shows, JSON-ready; times GELU's fusion where it works.

    Args:
        caps: this CPU's capabilities (detect()).
        verdict: what dtype='auto' picks on the CPU, and why (auto_dtype(caps)).

    Returns:
        The report --json prints: versions, capabilities, threads, cuda_available, auto_dtype (per device),
        auto_dtype_reason (why, by this CPU's kind; each job then holds bfloat16 to its accuracy bar), int8,
        families, cpu_attention (the C++ attention built, checked and timed here: whether the jobs run it, and
        why), gelu_fused_in_gemm where float32 GELU can run inside the GEMM, and float32_linear_kernels where
        oneDNN's float32 linear runs (linear_kernels).
    """
    import platform

    import tokenizers
    import torch

    from bertlite.layers import native_attention
    from bertlite.layers.onednn import activation_fusion_pays, activation_fusion_works, fusion_seconds, linear_works
    from bertlite.quant.int8 import describe_int8
    from bertlite.utils.capabilities import resolve_dtype

    report = {
        "versions": {
            "bertlite": __version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "python": platform.python_version(),
        },
        "capabilities": caps.as_dict(),
        "threads": torch.get_num_threads(),
        "cuda_available": torch.cuda.is_available(),
        "auto_dtype": {"cpu": verdict.dtype},
        "auto_dtype_reason": verdict.reason,
        "int8": describe_int8(),
        "families": families(),
        "cpu_attention": native_attention.survey(),
    }
    if activation_fusion_works("gelu", torch.float32):
        # BERT-base's intermediate Linear; a model times its own sizes when it is optimized.
        sizes = (torch.float32, *BERT_BASE_SIZES)
        report["gelu_fused_in_gemm"] = {
            "fused": activation_fusion_pays("gelu", *sizes),
            "seconds": fusion_seconds("gelu", *sizes),
        }
    if linear_works(torch.float32):
        fused = report.get("gelu_fused_in_gemm", {}).get("fused", False)
        report["float32_linear_kernels"] = linear_kernels(*BERT_BASE_SIZES, "gelu" if fused else None)
    if report["cuda_available"]:
        report["auto_dtype"]["cuda"] = str(resolve_dtype("auto", "cuda")).removeprefix("torch.")
    return report


def linear_kernels(hidden: int, intermediate: int, activation: str | None) -> list[dict[str, Any]]:
    """Which GEMM runs each float32 Linear of a BERT layer of these sizes here, as optimize picks it (timed once per
    shape and kept: bertlite.layers.linear_choice).

    Args:
        hidden, intermediate: the model's hidden and intermediate sizes.
        activation: the activation fused into the intermediate GEMM, or None where it runs after it.

    Returns:
        Per Linear optimize installs here: role, in_features, out_features, epilogue, kernel ("onednn" or "mkl"),
        seconds (each kernel's median seconds per pass; empty when no round counted), spread (the rounds counted and
        dropped, and mkl's min/median/max speed-up over onednn), kept (the rounds agreed) and summary (one line).
    """
    import torch

    from bertlite.layers.linear_choice import encoder_shapes, kernel_choice
    from bertlite.layers.onednn import OneDNNLinear, linear_add_works, packing_works

    rows = []
    for role, shape in encoder_shapes(hidden, intermediate, activation).items():
        if shape.epilogue == "add" and not linear_add_works(torch.float32):
            continue  # optimize leaves this Linear as it is
        choice = kernel_choice(torch.float32, shape, packing_works(torch.float32), OneDNNLinear)
        rows.append(
            {
                "role": role,
                "in_features": shape.in_features,
                "out_features": shape.out_features,
                "epilogue": shape.epilogue,
                "kernel": choice.picked,
                "seconds": choice.seconds(),
                "spread": choice.spread(),
                "kept": choice.decided,
                "summary": choice.summary(),
            }
        )
    return rows


def families() -> dict[str, list[str]]:
    """The model families bertlite loads: model_type -> its classes (BERT's: its heads.MODEL_CLASSES)."""
    from bertlite.config import FAMILIES
    from bertlite.models.heads import MODEL_CLASSES

    return {
        model_type: sorted(MODEL_CLASSES) if model_type == "bert" else [family.prefix + head for head in family.heads]
        for model_type, family in FAMILIES.items()
    }


def _print_report(report: dict[str, Any], caps: Capabilities, verdict: Verdict) -> None:
    """Print the report as text, one line per topic.

    Args:
        report: what _report gathered.
        caps: this CPU's capabilities, for their one-line summary.
        verdict: what dtype='auto' picks on the CPU, for its reason and whether it was timed.
    """
    for name, version in report["versions"].items():
        print(f"{name} {version}")
    print(f"cpu: {caps.summary()}")
    print(f"torch threads: {report['threads']}; cuda available: {'yes' if report['cuda_available'] else 'no'}")
    print("dtype='auto' resolves to: " + ", ".join(f"{d} on {dev}" for dev, d in report["auto_dtype"].items()))
    print(f"dtype='auto' on cpu: {verdict.reason}; each job keeps bfloat16 only where it meets its accuracy bar")
    print(f"dtype='int8' runs: {report['int8']['summary']}")
    print(f"attention on cpu: {report['cpu_attention']['summary']}")
    print(f"model families: {', '.join(report['families'])} (every job runs on each: docs/jobs.md)")
    if "gelu_fused_in_gemm" in report:
        fusion = report["gelu_fused_in_gemm"]
        seconds = fusion["seconds"]
        timed = "no timing round had the CPU"  # busy machines drop every round
        if seconds:
            timed = f"fused ran {seconds['fused'] / seconds['separate']:.2f}x as long as GEMM then GELU"
        where = "inside oneDNN's GEMM" if fusion["fused"] else "after the GEMM"
        print(f"float32 GELU runs {where} ({timed}, BERT-base's sizes)")
    if "float32_linear_kernels" in report:
        print("float32 Linear kernels (BERT-base's shapes; a model times its own when it is readied):")
        for row in report["float32_linear_kernels"]:
            shape = f"{row['in_features']} -> {row['out_features']}, {row['epilogue']} epilogue"
            print(f"  {row['role']} {shape}: {row['summary']}")
