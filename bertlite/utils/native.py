"""Building bertlite's C++ kernels for this CPU with torch's C++ extension tools (a C++ compiler and ninja).

Each source is built for the vector width torch dispatches to here (torch.backends.cpu.get_cpu_capability:
AVX512, AVX2, or portable vectors), once per machine: torch's extension cache keeps the library, so later
processes load it in about a second. The callers check what they built against torch's own ops before
using it, and keep torch's ops where a build fails.
"""

from __future__ import annotations

from pathlib import Path

import torch

# The vector flags of each of torch's CPU capabilities, as torch builds its own kernels for that capability;
# any other capability builds the portable vectors.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2"],
}


def flags() -> list[str]:
    """The compiler flags for this CPU's capability (the vector width torch dispatches to here)."""
    capability = torch.backends.cpu.get_cpu_capability()
    vector = _CAPABILITY_FLAGS.get(capability, [])
    # at::parallel_for runs on torch's OpenMP threads only when compiled with OpenMP, as torch is (where it is).
    threads = ["-fopenmp"] if torch.backends.openmp.is_available() else []
    # No FMA contraction: each value rounds as the separate multiply and add of torch's ops round it.
    return ["-O3", "-ffp-contract=off", f"-DCPU_CAPABILITY={capability}", *vector, *threads]


def load(name: str, source: Path) -> None:
    """Build `source` for this CPU (or find it built in torch's extension cache) and load it, so that the
    ops its TORCH_LIBRARY block defines appear under torch.ops.

    Args:
        name: the library's name; the capability is appended, so each vector width is its own build.
        source: the C++ file.

    Raises:
        Exception: whatever torch's C++ extension tools raise where the build fails (no compiler, no ninja).
    """
    from torch.utils import cpp_extension

    options = flags()
    cpp_extension.load(
        f"{name}_{torch.backends.cpu.get_cpu_capability().lower()}",
        [str(source)],
        extra_cflags=options,
        extra_ldflags=[flag for flag in options if flag == "-fopenmp"],
        is_python_module=False,
    )


def first_line(error: Exception) -> str:
    """A build error as one short line: its type and the first line of its message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}"
