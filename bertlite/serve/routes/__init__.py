"""The POST routes, one file per job: embed.py (dense, token and sparse vectors), rerank.py
(cross-encoder scores), tokens.py (the tokenizer). Each module's HANDLERS lists its routes."""
