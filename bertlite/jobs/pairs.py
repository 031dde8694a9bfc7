"""(query, document) pairs of one query: each side tokenized once, each pair built from their ids.

Tokenizing every pair whole reads the query once per document, so a long query costs its length
times the documents. The `tokenizers` library tokenizes the two texts of a pair on their own,
truncates them by its rule (`kept_lengths`), then puts the post-processor's special tokens around
them; QueryPairs does the same from ids tokenized once per text, so the pairs hold exactly the ids
the tokenizer gives each pair whole (tested against it).

Each text is read only as far as truncation needs (long_texts.TextCutter). The rule needs a side's
exact token count only when both sides are longer than max_length (the longer one keeps the odd
token); only then is the rest of a text counted, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from bertlite.jobs.long_texts import TextCutter

TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")


@dataclass(frozen=True)
class PairIds:
    """A pair's tokens, with what the jobs read of a tokenizers.Encoding."""

    ids: list[int]
    type_ids: list[int]
    overflowing: bool  # truncation cut tokens (an Encoding's overflowing list, read as a truth value)


@dataclass(frozen=True)
class PairTemplate:
    """The special tokens a post-processor puts around a pair, and the type id of each side's tokens."""

    before: tuple[tuple[int, int], ...]  # (id, type id) of each special token before the first text
    between: tuple[tuple[int, int], ...]
    after: tuple[tuple[int, int], ...]
    first_type: int
    second_type: int

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> PairTemplate:
        """Read from a pair the tokenizer encodes (it must not truncate).

        Raises:
            ValueError: a tokenizer whose pairs are not special tokens around the two texts in order.
        """
        e = tokenizer.encode("a", "b")
        segments: list[list[tuple[int, int]]] = [[], [], []]
        types: dict[int, set[int]] = {0: set(), 1: set()}
        side = -1  # the last text seen: -1 none yet, then 0 and 1
        for token, type_id, sequence in zip(e.ids, e.type_ids, e.sequence_ids, strict=True):
            if sequence is None:
                segments[side + 1].append((token, type_id))
            elif sequence in (side, side + 1):
                side = sequence
                types[side].add(type_id)
            else:
                raise ValueError(f"the tokenizer's pairs are not its two texts in order: {e.sequence_ids}")
        if side != 1 or len(types[0]) != 1 or len(types[1]) != 1:
            raise ValueError(f"cannot read the special tokens of the tokenizer's pairs from {e.sequence_ids}")
        return cls(*map(tuple, segments), first_type=types[0].pop(), second_type=types[1].pop())

    @property
    def special_count(self) -> int:
        return len(self.before) + len(self.between) + len(self.after)


def kept_lengths(first: int, second: int, budget: int, strategy: str) -> tuple[int, int]:
    """How many tokens of each text a pair keeps, as `tokenizers` truncates a pair.

    Args:
        first, second: the two texts' token counts.
        budget: max_length less the pair's special tokens.
        strategy: "longest_first" (shorten the longer text; both too long: each keeps half, the longer
            one the odd token), "only_first" or "only_second" (shorten that text alone).

    Returns:
        (tokens of first, tokens of second).

    Raises:
        ValueError: only_first or only_second, when that text is too short to make the pair fit.
    """
    if strategy not in TRUNCATION_STRATEGIES:
        raise ValueError(f"truncation strategy {strategy!r} is not one of {', '.join(TRUNCATION_STRATEGIES)}")
    if first + second <= budget:
        return first, second
    if budget == 0:  # tokenizers' special case: both texts go, whatever the strategy
        return 0, 0
    if strategy == "longest_first":
        n1, n2 = sorted((first, second))  # n1: the shorter text's
        n2 = n1 if n1 > budget else max(n1, budget - n1)
        if n1 + n2 > budget:
            n1, n2 = budget // 2, budget // 2 + budget % 2
        return (n2, n1) if first > second else (n1, n2)
    remove = first + second - budget
    target = first if strategy == "only_first" else second
    if target <= remove:
        raise ValueError(
            f"truncation {strategy}: a text of {target} tokens is too short to cut the pair to its max_length"
        )
    return (first - remove, second) if strategy == "only_first" else (first, second - remove)


@dataclass
class _Side:
    """One text's tokens: all of them when `whole`, else its first ones, more than max_length."""

    text: str
    ids: list[int]
    whole: bool
    count: int | None = None  # the exact token count of a text not whole, once needed


class QueryPairs:
    """Pairs of one query with many documents, the query tokenized once per call."""

    def __init__(self, tokenizer: Tokenizer, cutter: TextCutter) -> None:
        """Follow `tokenizer`'s truncation and post-processor.

        Args:
            tokenizer: the tokenizer whose pairs these are, its truncation set (none: pairs kept whole).
            cutter: reads a long text only as far as the tokenizer's max_length needs.
        """
        self.truncation = tokenizer.truncation
        # The sides are tokenized without truncation (their cut text is at most a piece past max_length).
        self._tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self._cutter = cutter
        self.template = PairTemplate.of(self._tokenizer)
        trunc = self.truncation
        self._budget = None if trunc is None else trunc["max_length"] - self.template.special_count
        # Right-side truncation keeps each text's first tokens, so a long text is read only that far;
        # below 0, `tokenizers` truncates nothing.
        self._cut = trunc is not None and trunc["direction"] == "right" and self._budget >= 0
        self._direction = "right" if trunc is None else trunc["direction"]

    def encode(self, query: str, documents: Sequence[str]) -> list[PairIds]:
        """The pairs (query, document) for each document, as the tokenizer encodes each pair.

        Args:
            query: the first text of every pair.
            documents: the second texts.

        Returns:
            One PairIds per document, in order.

        Raises:
            ValueError: a strategy only_first or only_second that cannot make a pair fit.
        """
        first = self._sides([query])[0]
        return [self._pair(first, second) for second in self._sides(documents)]

    def _sides(self, texts: Sequence[str]) -> list[_Side]:
        read = [self._cutter.cut(t) for t in texts] if self._cut else list(texts)
        encodings = self._tokenizer.encode_batch(read, add_special_tokens=False)
        limit = self.truncation["max_length"] if self.truncation is not None else None
        sides = []
        for text, cut, e in zip(texts, read, encodings, strict=True):
            ids = e.ids
            # cut() stops past max_length tokens, so a shorter cut text was read to its end
            whole = cut is text or limit is None or len(ids) <= limit
            sides.append(_Side(text, ids, whole))
        return sides

    def _pair(self, first: _Side, second: _Side) -> PairIds:
        n1, n2 = self._kept(first, second)
        kept = [_kept_ids(first.ids, n1, self._direction), _kept_ids(second.ids, n2, self._direction)]
        t = self.template
        ids = [i for i, _ in t.before] + kept[0] + [i for i, _ in t.between] + kept[1] + [i for i, _ in t.after]
        type_ids = (
            [k for _, k in t.before]
            + [t.first_type] * n1
            + [k for _, k in t.between]
            + [t.second_type] * n2
            + [k for _, k in t.after]
        )
        return PairIds(ids, type_ids, n1 < len(first.ids) or n2 < len(second.ids))

    def _kept(self, first: _Side, second: _Side) -> tuple[int, int]:
        if self._budget is None or self._budget < 0:
            return len(first.ids), len(second.ids)
        strategy = self.truncation["strategy"]
        if not (first.whole or second.whole) and strategy == "longest_first":
            # Both longer than max_length: each keeps half, and which is longer decides who keeps the odd token.
            return kept_lengths(self._count(first), self._count(second), self._budget, strategy)
        # A text longer than max_length stands in with its first tokens' count, more than max_length,
        # which the rule treats as it treats the whole count (the other text decides).
        return kept_lengths(len(first.ids), len(second.ids), self._budget, strategy)

    def _count(self, side: _Side) -> int:
        if side.count is None:
            side.count = len(side.ids) if side.whole else self._cutter.count(side.text)
        return side.count


def _kept_ids(ids: list[int], n: int, direction: str) -> list[int]:
    """The n tokens truncation keeps: the first ones, or the last with direction "left"."""
    return ids[:n] if direction == "right" else ids[len(ids) - n :]
