"""One measurement of `python -m bench compare`, in a child process: DTYPE MODEL TEXTS -> one JSON line.

It uses only bertlite's public API (Embedder), so it runs against any commit's tree. A tree whose Python API readies
no kernels of its own (before bertlite.utils.native) gets them built first, as that tree's CLI built them for a long
job, so both sides run the kernels their `bertlite embed` ran.
"""

from __future__ import annotations

import json
import sys
import time

from bench.common import read_corpus  # the one bench name every tree's bench.common has: it times on its own


def main() -> None:
    """Embed the corpus texts once to warm up on a few, then time them all; print one JSON line."""
    import bertlite
    from bertlite import Embedder

    dtype, model, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    int8_compiled = dtype == "int8-compiled"
    dtype = "int8" if int8_compiled else dtype
    if not _readies_its_kernels():
        _build_as_older_cli(int8_compiled)
    texts = read_corpus(count)
    options = {"dtype": dtype}  # "int8" included: both spellings reach the same quantization
    embedder = Embedder.from_pretrained(model, **options)
    embedder.encode(texts[:64])
    start = time.perf_counter()
    embedder.encode(texts)
    seconds = time.perf_counter() - start
    print(json.dumps({"bertlite": bertlite.__file__, "precision": embedder.precision, "texts_per_s": count / seconds}))


def _readies_its_kernels() -> bool:
    """Whether this tree's Embedder.from_pretrained readies its C++ kernels itself (every tree with one NativeOp)."""
    import importlib.util

    return importlib.util.find_spec("bertlite.utils.native") is not None


def _build_as_older_cli(int8_compiled: bool) -> None:
    """Build what an older tree's CLI built before it readied a model: its C++ attention, and int8's compiled kernels.

    Args:
        int8_compiled: build int8's compiled input quantization too ("int8-compiled").
    """
    try:
        from bertlite.layers import native_attention
    except ImportError:  # older still: no C++ attention at all
        return
    native_attention.build()
    if int8_compiled:
        from bertlite.quant.int8 import build_compiled_quantization

        build_compiled_quantization()


if __name__ == "__main__":
    main()
