"""sentence-transformers' layer over the jobs, as its `base/` is: base.py (STBase, the one base: loading keywords,
device, pool, save), names.py (bare names under a hub organization), folders.py (every job's folder reader), and
the members SparseEncoder (sparse_encoder.py) and MultiVectorEncoder (multi_vector.py) answer under its names.
Embedder and CrossEncoder hold theirs inline; SentenceTransformer is bertlite.jobs.sentence_transformer."""
