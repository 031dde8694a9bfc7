"""Keep the pages of freed large blocks mapped, so the next batch reuses them (glibc only).

glibc's malloc serves a block above its mmap threshold (dynamic, 128 KiB up to 32 MiB) with
fresh pages from the kernel and unmaps them on free, and returns a free heap top past its trim
threshold. torch's CPU tensors come from malloc, so each (tokens, 1536) activation the int8 path
allocates and frees per layer was faulted in page by page again, a large share of an int8 forward's
time (float32 and bf16 allocate less and are not slowed by it). Raising both thresholds keeps freed
blocks in the heap for the next batch: the process holds on to its peak, which it reached anyway.

Process-wide, so it is applied once and only where asked for (bertlite.quant.int8.quantize_int8);
BERTLITE_KEEP_FREED_MEMORY=0 turns it off. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import os
import platform

# mallopt's parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 20  # blocks up to this size come from the heap, never fresh mmap'ed pages
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top is returned only past this much

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; whether they are raised."""
    global _applied
    if _applied is None:
        _applied = False
        if os.environ.get("BERTLITE_KEEP_FREED_MEMORY", "1") != "0" and platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL("libc.so.6")
                _applied = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                )
            except (OSError, AttributeError):
                _applied = False
    return _applied


def release_freed_memory() -> bool:
    """Hand the free pages inside malloc's heaps back to the kernel (glibc's malloc_trim), unless
    keep_freed_memory() keeps them on purpose; whether it ran.

    A long-running server's batches of ever-new sizes leave free holes in the heaps of its threads
    that glibc returns only from a heap's top: without this its RSS creeps up while the memory in
    use stays flat.
    """
    if _applied or platform.libc_ver()[0] != "glibc":
        return False
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True
