"""How long a prompt may be, known before it is tokenized; and memory handed back after a big one.

Tokenizing costs about 5 s and 200 MB per megabyte of text here, so a 30 MB prompt (under
the body limit) would hold a worker for minutes. A token never covers more characters than the
longest token of the vocabulary, so a prompt of C characters has at least C / that many tokens:
past `limit` x that many characters it is refused unread (`fewest_tokens`). What is left to
tokenize is at most that long and runs in a worker thread, never on the event loop.

`release_memory` (after a request of more than `LARGE_BODY_BYTES`): the big request's buffers
are freed, cycles collected, and glibc's allocator gives the freed pages back to the system
(`malloc_trim`), so one large call does not leave the process gigabytes larger.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import math
import weakref
from typing import Any

from envharness.core.concurrency import run_sync
from envharness.models.images import message_text

#: Requests larger than this are followed by `release_memory`.
LARGE_BODY_BYTES = 1024 * 1024
_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def max_chars_per_token(tokenizer: Any) -> int | None:
    """The most characters one token of `tokenizer` covers (its longest vocabulary entry: a
    byte-level entry has one character per byte, so it bounds the characters too); None when
    the tokenizer does not list its vocabulary."""
    inner = (
        getattr(tokenizer, "tokenizer", None) if getattr(tokenizer, "accepts_images", False) else tokenizer
    )
    try:
        return _LONGEST[inner]
    except (KeyError, TypeError):
        pass
    try:
        vocab = inner.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary: no precheck
        return None
    longest = max((len(t) for t in vocab), default=0) or None
    try:
        _LONGEST[inner] = longest
    except TypeError:
        pass
    return longest


def fewest_tokens(messages: list[dict[str, Any]], prefix: list[int] | None, per_token: int) -> int:
    """A lower bound on the prompt's tokens: the prefix's, and the new messages' characters
    over the most characters a token covers (the template only adds to it)."""
    chars = sum(len(message_text(m)) for m in messages)
    return len(prefix or []) + math.ceil(chars / per_token)


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_memory() -> None:
    """Free what a finished big request left: cycles, then the allocator's free pages (glibc)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class ReleaseAfterLargeBodies:
    """ASGI middleware: once a request with a body over `LARGE_BODY_BYTES` is answered and its
    frames are gone, `release_memory` runs in a worker thread."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            if seen > LARGE_BODY_BYTES:
                await run_sync(release_memory)
