"""Text to vectors: Embedder, pooling, sentence-transformers settings, the embed job's file I/O, Ray."""
