"""TEI's tokenizer routes, which every model serves: `/tokenize` (the tokens a text becomes, as the
model sees them) and `/decode` (token ids back to text)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from itertools import accumulate

from bertlite.serve.endpoint import Handler
from bertlite.serve.schemas import RequestError
from bertlite.serve.schemas_tokens import DecodeRequest, TokenizeRequest, parse_decode, parse_tokenize
from bertlite.serve.service import Service


async def tei_tokenize(service: Service, req: TokenizeRequest) -> list[list[dict]]:
    """Per input, its tokens [{id, text, special, start, stop}], truncated at the max input length.
    A special token's text is the token and its start/stop null; another's text is its span of the
    input (prompt included), start/stop its UTF-8 byte offsets, as TEI gives them."""
    job = service.ready_job("/tokenize")
    service.check_inputs(req.texts, "inputs")
    texts = req.texts
    if req.prompt_name is not None:
        prompts = getattr(job, "prompts", {})
        if req.prompt_name not in prompts:
            known = ", ".join(map(repr, prompts)) or "none"
            raise RequestError(
                422, f"prompt_name: {req.prompt_name!r} is not one of the model's prompts ({known})", "prompt_name"
            )
        texts = [prompts[req.prompt_name] + text for text in texts]

    def tokenize() -> list[list[dict]]:
        encodings = job.tokenizer.encode_batch(texts, add_special_tokens=req.add_special_tokens)
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

    return await asyncio.get_running_loop().run_in_executor(None, tokenize)


async def tei_decode(service: Service, req: DecodeRequest) -> list[str]:
    """Per sequence of ids, its text."""
    job = service.ready_job("/decode")
    service.check_inputs([], "ids", count=len(req.ids))
    vocab = job.tokenizer.get_vocab_size()
    for i, ids in enumerate(req.ids):
        if ids and (top := max(ids)) >= vocab:
            raise RequestError(422, f"ids[{i}]: token id {top} is not below the vocabulary size {vocab}", "ids")
    return job.tokenizer.decode_batch(req.ids, skip_special_tokens=req.skip_special_tokens)


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
