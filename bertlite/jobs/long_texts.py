"""Long texts read only as far as max_length needs: memory bounded by max_length, not by the text.

Tokenizing a whole text to keep its first max_length tokens costs memory in proportion to the text
(a 10 MB line: about 1.7 GB, mostly the overflowing tokens). TextCutter reads a long text piece by
piece, each piece ending at a word boundary of the BERT pipeline, and stops once the pieces hold more
tokens than max_length keeps; the text it returns tokenizes, with truncation, to exactly the ids of
the whole text. Pieces are tokenized on their own, so the text's tokens are the pieces' tokens
joined: the normalizer (clean text, CJK spacing, accents, lowercase) works character by character,
and WordPiece word by word, and a cut after whitespace, ASCII punctuation or a CJK character (all
word boundaries after normalization too) never splits a word or an added token (checked).

A run of many thousands of characters without a boundary is one word: it becomes one [UNK] when
its normalized form is longer than WordPiece's max_input_chars_per_word, so a short stand-in that
tokenizes the same replaces it. Pieces without tokens (whitespace, control characters) shrink to a
space.

Other tokenizers (RoBERTa's byte-level BPE, XLM-R's Unigram, ...) are cut to a prefix of the text: their
models tokenize each word of the pre-tokenizer on its own, and their normalizers and pre-tokenizers read a
character in the light of its neighbours only, so a prefix splits into the text's own words but for its
last, whose tokens a cut may change. A prefix whose words before its last two hold more tokens than
max_length keeps tokenizes, with truncation, to exactly the text's ids; the prefix read grows fourfold until
it does (a text that is one long word is read whole). Pipelines with other steps are read whole.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator

from tokenizers import Tokenizer

# Texts up to this many characters (or PIECE_PER_TOKEN per token of max_length, if more) are
# tokenized whole; a longer one is read a piece of that size at a time.
MIN_PIECE_CHARS = 4096
PIECE_PER_TOKEN = 16
# Characters after which a word ends in the BERT pipeline, whatever follows: whitespace (which
# BertNormalizer keeps or maps to a space), ASCII punctuation (BertPreTokenizer isolates it).
_WHITESPACE = " \t\n\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_PUNCTUATION = re.escape(string.punctuation)
# The ranges BertNormalizer's handle_chinese_chars puts spaces around (tokenizers' is_chinese_char).
_CJK = (
    "\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
    "\U0002b740-\U0002b81f\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f"
)

_ASCII_WORD = re.compile("[A-Za-z0-9]+")
# The steps a prefix cut is exact for (see the module's docstring): models that tokenize a word at a time,
# normalizers and pre-tokenizers that read each character with its neighbours only.
_WORD_MODELS = {"BPE", "Unigram", "WordPiece", "WordLevel"}
_LOCAL_NORMALIZERS = {
    "BertNormalizer", "NFC", "NFD", "NFKC", "NFKD", "Nmt", "Lowercase", "Strip", "StripAccents", "Precompiled",
    "Replace", "Prepend",
}  # fmt: skip
_LOCAL_PRE_TOKENIZERS = {
    "BertPreTokenizer", "ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits",
    "CharDelimiterSplit", "UnicodeScripts",
}  # fmt: skip


class TextCutter:
    """Shortens long texts to what tokenizing with truncation at max_length keeps, with the same ids."""

    def __init__(self, tokenizer: Tokenizer, max_length: int) -> None:
        """Check whether `tokenizer` is the BERT pipeline this works for; else cut() returns texts whole.

        Args:
            tokenizer: the tokenizer the texts go through (its truncation settings are not used).
            max_length: the tokens per text kept, special tokens included.
        """
        self.max_length = max_length
        self.piece_chars = max(MIN_PIECE_CHARS, PIECE_PER_TOKEN * max_length)
        self._counter = Tokenizer.from_str(tokenizer.to_str())
        self._counter.no_truncation()
        self._counter.no_padding()
        spec = json.loads(tokenizer.to_str())
        normalizer, model = spec.get("normalizer") or {}, spec.get("model") or {}
        added = spec.get("added_tokens") or []
        self.enabled = (
            normalizer.get("type") == "BertNormalizer"
            and (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and model.get("type") == "WordPiece"
            and not any(token.get("normalized") for token in added)
            and not self._counter.encode_special_tokens
        )
        # Any other pipeline of local steps: cut to a prefix (_prefix), its ids checked word by word.
        self.by_prefix = (
            not self.enabled
            and model.get("type") in _WORD_MODELS
            and _local(spec.get("normalizer"), _LOCAL_NORMALIZERS, "normalizers")
            and _local(spec.get("pre_tokenizer"), _LOCAL_PRE_TOKENIZERS, "pretokenizers")
        )
        self._added = [token["content"] for token in added if token.get("content")]
        cjk = _CJK if normalizer.get("handle_chinese_chars", True) else ""
        self._boundary = re.compile(f"[{_WHITESPACE}{_PUNCTUATION}{cjk}]")
        self._max_word = int(model.get("max_input_chars_per_word", 100))
        # One word longer than WordPiece takes: a single [UNK], the stand-in for any such word.
        self._long_word: str | None = None
        if self.enabled:
            unk = self._counter.token_to_id(model.get("unk_token", "[UNK]"))
            long_word = "x" * (self._max_word + 1)
            if self._counter.encode(long_word, add_special_tokens=False).ids == [unk]:
                self._long_word = long_word

    def cut(self, text: str) -> str:
        """`text`, or a shorter text with the same ids under truncation at max_length.

        Args:
            text: the text.

        Returns:
            `text` itself when it is short or the tokenizer is not the BERT pipeline; else a text
            that tokenizes (with truncation at max_length, right side) to the same ids and is
            truncated exactly when `text` is: the pieces up to just past max_length tokens, with
            long runs and token-less stretches replaced by short stand-ins.
        """
        if len(text) <= self.piece_chars:
            return text  # the common case: no count needed, and the caller tokenizes it once
        if self.by_prefix:
            return self._prefix(text, self.max_length + 1)[0]
        if not self.enabled:
            return text
        return self.cut_to(text, self.max_length + 1)[0]

    def cut_pair(self, first: str, second: str) -> tuple[str, str]:
        """cut() for a (first, second) pair under longest_first truncation, which keeps a number of
        tokens of each side that depends on the other side's count and on which side is longer: so
        both are counted (a piece at a time), and the longer side keeps more tokens than the other.

        Returns:
            The two texts, each itself or shorter, with the pair's ids under truncation.
        """
        if max(len(first), len(second)) <= self.piece_chars:
            return first, second
        need = self.max_length + 1
        if self.by_prefix:
            return self._prefix_pair(first, second, need)
        if not self.enabled:
            return first, second
        if self.count(first) > self.count(second):
            second, kept = self.cut_to(second, need)
            return self.cut_to(first, max(need, kept + 1))[0], second
        first, kept = self.cut_to(first, need)
        return first, self.cut_to(second, max(need, kept))[0]

    def cut_to(self, text: str, need: int) -> tuple[str, int]:
        """`text`, or a text whose tokens are its first `need` or more tokens; and that text's count.

        Args:
            text: the text.
            need: the tokens (special tokens left out) the result must hold, if `text` has as many.

        Returns:
            (text or its stand-in, its token count).
        """
        if not self.enabled or len(text) <= self.piece_chars:
            return text, len(self._counter.encode(text, add_special_tokens=False).ids)
        kept: list[str] = []
        count, start, whole = 0, 0, True
        for end, piece, tokens in self._pieces(text):
            count += tokens
            if tokens:
                kept.append(piece)
            elif kept and kept[-1] != " ":
                kept.append(" ")  # keeps the words on either side apart, as the piece did
            whole = whole and tokens > 0 and len(piece) == end - start
            start = end
            if count >= need and end < len(text):
                return "".join(kept), count
        # Read to its end: the text itself, unless stand-ins made it shorter.
        return (text if whole else "".join(kept)), count

    def count(self, text: str) -> int:
        """The tokens of the whole text, special tokens left out, read a piece at a time.

        Args:
            text: the text.

        Returns:
            The count of len(tokenizer.encode(text, add_special_tokens=False).ids).
        """
        if not self.enabled or len(text) <= self.piece_chars:
            return len(self._counter.encode(text, add_special_tokens=False).ids)
        return sum(tokens for _, _, tokens in self._pieces(text))

    def _prefix(self, text: str, need: int) -> tuple[str, int]:
        """A prefix of `text` whose first `need` tokens are the text's (or all of them), and its count.

        A prefix is read, then one four times longer, until its tokens before its last two words (which the
        cut may change) are `need` or more; else the text is whole.

        Args:
            text: the text.
            need: the tokens (special tokens left out) the prefix must share with the text.

        Returns:
            (the prefix, or `text` itself, its token count).
        """
        size = self.piece_chars
        while size < len(text):
            encoding = self._counter.encode(text[:size], add_special_tokens=False)
            if _settled(encoding.word_ids) >= need:
                return text[:size], len(encoding.ids)
            size *= 4
        return text, len(self._counter.encode(text, add_special_tokens=False).ids)

    def _prefix_pair(self, first: str, second: str, need: int) -> tuple[str, str]:
        """cut_pair for a pipeline cut by prefix: a long side next to a short one is cut to a prefix longer
        than the short side (so longest_first takes from it as from the whole); two long sides are read whole,
        as which is longer needs their whole counts."""
        short_first = len(first) <= self.piece_chars
        if not short_first and len(second) > self.piece_chars:
            return first, second
        short = first if short_first else second
        count = len(self._counter.encode(short, add_special_tokens=False).ids)
        cut = self._prefix(second if short_first else first, max(need, count + 1))[0]
        return (first, cut) if short_first else (cut, second)

    def _pieces(self, text: str) -> Iterator[tuple[int, str, int]]:
        """(end, piece, tokens) in order: text[start:end] or a stand-in with the same tokens, and its count."""
        start = 0
        while start < len(text):
            end, piece = self._next_piece(text, start)
            yield end, piece, len(self._counter.encode(piece, add_special_tokens=False).ids)
            start = end

    def _next_piece(self, text: str, start: int) -> tuple[int, str]:
        """The piece at `start`: about piece_chars up to a safe boundary, or a long run without one."""
        size = self.piece_chars
        if len(text) - start <= size:
            return len(text), text[start:]
        target = start + size
        for m in self._boundary.finditer(text, target, target + size):
            if not self._splits_added(text, m.end()):
                return m.end(), text[start : m.end()]
        # No boundary for piece_chars characters: a run. First the text before it, then the run itself.
        back = text[start:target][::-1]
        for m in self._boundary.finditer(back):
            run_start = target - m.start()
            if not self._splits_added(text, run_start):
                return run_start, text[start:run_start]
        found = self._boundary.search(text, target)
        run_end = found.start() if found else len(text)
        return run_end, self._stand_in(text, start, run_end)

    def _splits_added(self, text: str, cut: int) -> bool:
        """Whether a cut at `cut` falls inside an added token ([MASK], ...) written in the text."""
        for token in self._added:
            n = len(token)
            at = text.find(token, max(cut - n + 1, 0), cut + n - 1)
            while at != -1 and at < cut:
                if at + n > cut:
                    return True
                at = text.find(token, at + 1, cut + n - 1)
        return False

    def _stand_in(self, text: str, start: int, end: int) -> str:
        """text[start:end], a run without boundary characters, or a short text with its tokens; read a
        piece at a time, so a run of any length costs a piece's memory."""
        whole = any(text.find(token, start, end) != -1 for token in self._added)
        if self._long_word is None or whole or self._splits_added(text, end):
            return text[start:end]
        if _ASCII_WORD.fullmatch(text, start, end):  # letters and digits: normalized one to one, no boundary
            return self._long_word if end - start > self._max_word else text[start:end]
        normalizer, pre_tokenizer = self._counter.normalizer, self._counter.pre_tokenizer
        length, head = 0, ""
        for at in range(start, end, self.piece_chars):
            normalized = normalizer.normalize_str(text[at : min(at + self.piece_chars, end)])
            words = pre_tokenizer.pre_tokenize_str(normalized)
            if normalized and (len(words) != 1 or words[0][0] != normalized):
                return text[start:end]  # normalization made a boundary (rare characters): the run whole
            length += len(normalized)
            head = (head + normalized)[: self._max_word + 1]
        if length == 0:
            return " "
        if length > self._max_word:
            return self._long_word
        return head if normalizer.normalize_str(head) == head else text[start:end]


def _local(step: dict | None, kinds: set[str], members: str) -> bool:
    """Whether a normalizer or pre-tokenizer (as tokenizer.json gives it) is none, one of `kinds`, or a
    Sequence (its steps under `members`) of them."""
    if step is None:
        return True
    if step.get("type") == "Sequence":
        return all(_local(member, kinds, members) for member in step.get(members) or [])
    return step.get("type") in kinds


def _settled(word_ids: list[int | None]) -> int:
    """The leading tokens of a prefix that belong to words before its last two: the tokens the text shares."""
    words = sorted({word for word in word_ids if word is not None})
    if len(words) < 3:
        return 0
    last = words[-2]
    count = 0
    for word in word_ids:
        if word is None or word >= last:
            break
        count += 1
    return count
