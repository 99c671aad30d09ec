"""A text prompt to token ids, with the checks every text input gets: not blank, valid Unicode, at least one token.

The engine tokenises text prompts through it; the server does too when it needs a prompt's length before the
engine sees it (serving/generation.py), and then sends the ids, so each prompt is tokenised once.
"""
from __future__ import annotations

from collections.abc import Callable

from orthrus_rag.engine.errors import InvalidRequestError


def encode_text(encode: Callable[[str], list[int]], text: str) -> list[int]:
    """`encode(text)` (a tokenizer's encode), or an InvalidRequestError on `input` saying what is wrong."""
    if not text.strip():
        raise InvalidRequestError("the input is empty; send at least one non-blank character", "input")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidRequestError(f"the input is not valid Unicode text (a lone surrogate at character "
                                  f"{err.start}); send UTF-8 text", "input") from None
    ids = encode(text)
    if not ids:
        raise InvalidRequestError("the input has no tokens (the tokenizer drops every character in it); "
                                  "send text with at least one word", "input")
    return ids
