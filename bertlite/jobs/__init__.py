"""The jobs: Embedder, CrossEncoder, SparseEncoder, MultiVectorEncoder, their sentence-transformers configs,
kind detection, long-text cutting and query-document pairs; base.py readies a model for all of them."""
