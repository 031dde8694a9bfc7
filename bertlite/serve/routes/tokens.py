"""TEI's tokenizer routes, which every model serves: `/tokenize` (the tokens a text becomes, as the
model sees them) and `/decode` (token ids back to text): each parses its body, makes one call into the
service and shapes the answer as TEI does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from itertools import accumulate

from tokenizers import Encoding

from bertlite.serve.endpoint import Handler
from bertlite.serve.schemas_tokens import DecodeRequest, TokenizeRequest, parse_decode, parse_tokenize
from bertlite.serve.service import Service


async def tei_tokenize(service: Service, req: TokenizeRequest) -> list[list[dict]]:
    """Per input, its tokens [{id, text, special, start, stop}], truncated at the max input length.
    A special token's text is the token and its start/stop null; another's text is its span of the
    input (prompt included), start/stop its UTF-8 byte offsets, as TEI gives them. Shaped off the
    event loop: a long text's byte offsets take a while, and other requests must not wait."""
    texts, encodings = await service.tokenize_texts(req)
    return await asyncio.get_running_loop().run_in_executor(None, token_records, texts, encodings)


def token_records(texts: Sequence[str], encodings: Sequence[Encoding]) -> list[list[dict]]:
    """tei_tokenize's answer for the texts and their encodings."""
    out = []
    for text, e in zip(texts, encodings, strict=True):
        at = byte_offsets(text)
        out.append(
            [
                {"id": i, "text": token, "special": True, "start": None, "stop": None}
                if special
                else {"id": i, "text": text[start:stop], "special": False, "start": at[start], "stop": at[stop]}
                for i, token, special, (start, stop) in zip(
                    e.ids, e.tokens, e.special_tokens_mask, e.offsets, strict=True
                )
            ]
        )
    return out


async def tei_decode(service: Service, req: DecodeRequest) -> list[str]:
    """Per sequence of ids, its text."""
    return service.decode(req)


HANDLERS = (
    Handler("/tokenize", parse_tokenize, tei_tokenize),
    Handler("/decode", parse_decode, tei_decode),
)


def byte_offsets(text: str) -> Sequence[int]:
    """The UTF-8 byte offset of each character index of `text`, its length included (tokenizers gives
    Python character offsets; TEI's Rust tokenizer gives bytes)."""
    if text.isascii():
        return range(len(text) + 1)
    return list(accumulate((len(c.encode("utf-8")) for c in text), initial=0))
