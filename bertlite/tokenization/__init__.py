"""Tokenizers on the `tokenizers` library with transformers' surface; no torch import.

- pipeline: the backend side: a checkpoint's files, load_tokenizer (what bertlite's jobs call), the BERT
  normalizer / pre-tokenizer / template, padding and truncation.
- base: TokenizerBase, transformers' vocabulary, special-token and decoding members over any backend.
- tokenizer: BertTokenizer (and its alias BertTokenizerFast): __call__, pad, from_pretrained, save_pretrained.
- batch_encoding: BatchEncoding, what a call returns.

Every name the former bertlite/tokenization.py module defined is importable from here.
"""

from __future__ import annotations

from bertlite.tokenization.base import SPECIAL_TOKENS, UNSUPPORTED_METHODS, clean_up_tokenization
from bertlite.tokenization.batch_encoding import BatchEncoding
from bertlite.tokenization.pipeline import (
    BERT_DEFAULTS,
    BERT_TOKENIZER_CLASSES,
    INIT_KEYS,
    LARGE_INTEGER,
    PADDING,
    PLAIN_TOKENIZER_CLASSES,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    TRUNCATION,
    VERY_LARGE_INTEGER,
    VOCAB_FILE,
    load_tokenizer,
)
from bertlite.tokenization.tokenizer import IGNORED_KEYS, TENSOR_TYPES, BertTokenizer, BertTokenizerFast

__all__ = [
    "BERT_DEFAULTS",
    "BERT_TOKENIZER_CLASSES",
    "IGNORED_KEYS",
    "INIT_KEYS",
    "LARGE_INTEGER",
    "PADDING",
    "PLAIN_TOKENIZER_CLASSES",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKENS_MAP_FILE",
    "TENSOR_TYPES",
    "TOKENIZER_CONFIG_FILE",
    "TOKENIZER_FILE",
    "TRUNCATION",
    "UNSUPPORTED_METHODS",
    "VERY_LARGE_INTEGER",
    "VOCAB_FILE",
    "BatchEncoding",
    "BertTokenizer",
    "BertTokenizerFast",
    "clean_up_tokenization",
    "load_tokenizer",
]
