"""Small text helpers shared by the jobs, the file readers and the server."""

from __future__ import annotations

import re

# JSON can spell a lone UTF-16 surrogate ("\\ud800"), which no tokenizer accepts
# and no UTF-8 file can hold; a proper pair decodes to one character and never matches.
SURROGATE = re.compile("[\ud800-\udfff]")  # a lone half of a UTF-16 pair: not text, and tokenizers refuses it
