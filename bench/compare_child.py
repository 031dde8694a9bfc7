"""One measurement of `python -m bench compare`, in a child process: DTYPE MODEL TEXTS -> one JSON line.

It uses only bertlite's public API (Embedder, and the compiled kernels where the tree has them), so it runs against
any commit's tree.
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
    try:  # the C++ attention, where this tree has it: built before the model is made ready, as a long job does
        from bertlite.layers import native_attention
    except ImportError:
        pass
    else:
        native_attention.build()
    if dtype == "int8-compiled":  # as a long job runs int8: its compiled kernels built before it quantizes
        from bertlite.quant.int8 import build_compiled_quantization

        build_compiled_quantization()
        dtype = "int8"
    texts = read_corpus(count)
    options = {"dtype": dtype}  # "int8" included: both spellings reach the same quantization
    embedder = Embedder.from_pretrained(model, **options)
    embedder.encode(texts[:64])
    start = time.perf_counter()
    embedder.encode(texts)
    seconds = time.perf_counter() - start
    print(json.dumps({"bertlite": bertlite.__file__, "precision": embedder.precision, "texts_per_s": count / seconds}))


if __name__ == "__main__":
    main()
