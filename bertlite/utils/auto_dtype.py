"""dtype="auto" on a CPU: bfloat16 on the kinds of CPU where it was measured faster than float32, else float32.

The verdict is a rule of the CPU's kind, not a timing taken at load: a timing taken while other processes
hold the CPU cannot decide, and two replicas of one deployment on the same CPU must run the same mode and so
serve the same numbers. The rule comes from bertlite's own end-to-end measurements (`python -m bench
throughput`, the result files under bench/results/ name each CPU):

- Intel with AMX (amx_bf16): bf16 GEMMs run on the tiles, 2.7-4.1x float32 end to end -> bfloat16;
- AMD with AVX512_BF16 (Zen 4 and later): 1.6x float32 end to end -> bfloat16;
- Intel with AVX512_BF16 but no AMX (Cooper Lake): bf16 GEMMs at half float32's rate (0.71x) -> float32;
- no native bf16 (AVX2, AVX-512 without bf16, an ISA cap below it): torch emulates bf16 -> float32.

float16 is never picked: its range (65,504) overflows on real checkpoints' activations, and a NaN vector
would be a silently wrong number. Each job then keeps bfloat16 only where it meets the job's accuracy bar
on held-out texts (bertlite.jobs.bars); this module says only what the CPU runs fast.

BERTLITE_AUTO_DTYPE=float32|bfloat16 forces the verdict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertlite.utils.capabilities import Capabilities

FORCE_VARIABLE = "BERTLITE_AUTO_DTYPE"
CANDIDATES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Verdict:
    """What dtype="auto" picks on this CPU, and why."""

    dtype: str  # "float32" or "bfloat16"
    reason: str  # one line, for `bertlite env`, the server's /info and the load message


def auto_dtype(caps: Capabilities) -> Verdict:
    """The dtype "auto" runs a model in on this CPU, by the CPU's kind (the module docstring has the rule).

    Args:
        caps: this CPU's capabilities (bertlite.utils.capabilities.detect()).

    Returns:
        The Verdict: forced by BERTLITE_AUTO_DTYPE, else by the rule. The same CPU gives the same verdict
        in every process, however busy the machine.

    Raises:
        ValueError: BERTLITE_AUTO_DTYPE is set to something other than float32 or bfloat16.
    """
    forced = os.environ.get(FORCE_VARIABLE, "").strip()
    if forced:
        if forced not in CANDIDATES:
            raise ValueError(f"{FORCE_VARIABLE}={forced!r}: choose one of {', '.join(CANDIDATES)}")
        return Verdict(forced, f"forced by {FORCE_VARIABLE}")
    if not caps.bf16_native:
        return Verdict("float32", "bfloat16 is not native on this CPU (torch would emulate it, several times slower)")
    flags = caps.flags or ()
    if "amx_bf16" in flags:
        return Verdict("bfloat16", "this CPU has AMX bf16 tiles (bfloat16 measured 2.7-4.1x float32 on such CPUs)")
    if "AMD" in (caps.model_name or "").upper():
        return Verdict("bfloat16", "AMD with AVX512_BF16 (bfloat16 measured 1.6x float32 on Zen 4)")
    return Verdict(
        "float32",
        "AVX512_BF16 without AMX (bfloat16 GEMMs measured at half float32's rate on such Intel CPUs)",
    )
