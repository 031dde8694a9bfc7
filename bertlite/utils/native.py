"""Building bertlite's C++ kernels for this CPU with torch's C++ extension tools (a C++ compiler and ninja), and
NativeOp: one optional kernel's build, check, timing and verdict.

Each source is built for the vector width torch dispatches to here (torch.backends.cpu.get_cpu_capability:
AVX512, AVX2, or portable vectors), once per machine: torch's extension cache keeps the library, so later
processes load it in about a second. The callers check what they built against torch's own ops before
using it, and keep torch's ops where a build fails.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertlite.utils.measured import Choice, Rounds, decide, machine_key

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


@dataclass(frozen=True)
class Timing:
    """How a NativeOp is timed against its rival, once per machine (bertlite.utils.measured).

    Attributes:
        what: what is timed, in words: the key of its verdict in the timings cache (with the machine's).
        names: (the op's name, the rival's name) in the rounds measure gives.
        rival: the rival in words, for the reason the op is not used ("SDPA").
        measure: times both on the loaded op: its Rounds.
    """

    what: str
    names: tuple[str, str]
    rival: str
    measure: Callable[[Any], Rounds]


class NativeOp:
    """One optional kernel's life in a process: built (or loaded from a cache) once, checked against its
    reference, timed against its rival once per machine, and the verdict kept with why it is not used.

    The attention op (bertlite.layers.native_attention), int8's C++ passes (bertlite.quant.ops) and int8's
    torch.compile kernel (bertlite.quant.compiled) are its instances. An environment variable set to "0"
    leaves an op out.
    """

    def __init__(
        self,
        load: Callable[[], Any],
        check: Callable[[Any], str | None],
        variables: tuple[str, ...],
        failed: str = "its C++ build",
        timing: Timing | None = None,
    ) -> None:
        """
        Args:
            load: builds or loads the op (raises where it cannot: no compiler, no ninja).
            check: why the loaded op's numbers differ from its reference's on a probe, or None (raising where
                the op cannot build: a lazy one builds on its first call).
            variables: environment variables that leave the op out when "0".
            failed: what failed where load raises, in words ("its C++ build", "torch.compile").
            timing: how it is timed against its rival; None: used wherever it checks out.
        """
        self.load, self.check, self.variables, self.failed, self.timing = load, check, variables, failed, timing
        # "ops": the op once loaded and checked (None if not), "reason": why not; "faster": the timing's
        # verdict, with "timed" (its summary)
        self.state: dict[str, Any] = {}
        self._lock = threading.Lock()

    def enabled_by_environment(self) -> bool:
        """Whether the environment allows the op (none of its variables "0")."""
        return all(os.environ.get(name, "1") != "0" for name in self.variables)

    def available(self) -> bool:
        """Load and check the op once per process, untimed (later calls return at once).

        Returns:
            Whether it loads here and agrees with its reference; if not, reason() says why.
        """
        with self._lock:
            if "ops" not in self.state:
                self.state["ops"], self.state["reason"] = self._load_checked()
            return self.state["ops"] is not None

    def build(self) -> bool:
        """available(), then its timing's verdict, once per process (bertlite.utils.measured.decide).

        Returns:
            Whether it is used here; if not, reason() says why.
        """
        if not self.available():
            return False
        with self._lock:
            if "faster" not in self.state:
                self.state["faster"] = True
                if self.timing is not None:
                    choice = self.verdict()
                    self.state["faster"] = choice.picked == self.timing.names[0]
                    self.state["timed"] = choice.summary()
                    slower = f"timed slower than {self.timing.rival} on this CPU ({choice.summary()})"
                    self.state["reason"] = None if self.state["faster"] else slower
            return bool(self.state["faster"])

    def built(self) -> bool:
        """Whether this process built, checked and timed the op, and uses it."""
        return bool(self.state.get("faster")) and self.state.get("ops") is not None

    @property
    def ops(self) -> Any:
        """The loaded op where it is used (built()), else None."""
        return self.state.get("ops") if self.built() else None

    def reason(self) -> str | None:
        """Why the op is not used (None when it is, or before build())."""
        return self.state.get("reason")

    def verdict(self) -> Choice:
        """The timing's Choice on this machine for the loaded op (measured once per machine and process)."""
        from bertlite.utils.capabilities import detect

        assert self.timing is not None and self.state.get("ops") is not None
        timing, ops = self.timing, self.state["ops"]
        return decide(machine_key(detect(), timing.what), *timing.names, lambda: timing.measure(ops))

    def fail(self, reason: str) -> None:
        """Stop using the op from now on (it failed at run time), and say why."""
        self.state["ops"], self.state["reason"] = None, reason

    def _load_checked(self) -> tuple[Any, str | None]:
        """The op loaded and checked, or None and why not."""
        if not self.enabled_by_environment():
            return None, " or ".join(f"{name}=0" for name in self.variables)
        try:  # a lazy op (torch.compile's) builds on its check's first call, so a failure there is a build's too
            ops = self.load()
            mismatch = self.check(ops)
        except Exception as error:  # no compiler, no ninja, no headers: keep torch's ops
            return None, f"{self.failed} failed here ({first_line(error)})"
        return (None, mismatch) if mismatch else (ops, None)
