"""Prompts to token ids, off the engine thread and at a bounded cost.

The engine thread decodes for every running request, so a prompt tokenized there
would stall every client for as long as tokenizing takes.  Here prompts are
tokenized on one thread of their own, with a copy of the tokenizer (the engine
thread keeps using the original), and a text is first checked against a cheap
bound: a token never covers more than ``max_token_bytes`` bytes, so a text of
``B`` UTF-8 bytes has at least ``ceil(B / max_token_bytes)`` tokens, and a text
that cannot fit the context is refused before any tokenizing at all.  At most
``max_pending`` prompts wait for or run on that thread; beyond that a request is
a 503 to retry, so a flood of large prompts cannot queue without bound (each
waiting prompt holds its text in memory).
"""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jinja2 import TemplateError  # what a chat template's raise_exception raises

from ..engine.prompts import check_prompt
from .errors import bad_request, service_unavailable


def longest_token_bytes(tokenizer: Any) -> int | None:
    """The most UTF-8 bytes any vocabulary entry is written with (an upper bound
    on the bytes one token covers: byte-level BPE writes each byte as one
    character of one or two bytes), or ``None`` for a tokenizer without
    ``get_vocab`` (then only the body cap bounds a prompt)."""
    if not hasattr(tokenizer, "get_vocab"):
        return None
    return max((len(piece.encode("utf-8", "surrogatepass")) for piece in tokenizer.get_vocab()), default=None)


class PromptEncoder:
    def __init__(self, tokenizer: Any, vocab_size: int, context_length: int, max_pending: int) -> None:
        self.tokenizer = copy.deepcopy(tokenizer)
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.max_token_bytes = longest_token_bytes(tokenizer)
        self.max_pending = max_pending
        self.pending = 0  # prompts waiting for or on the tokenizer thread (touched on the event loop only)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cast-tokenize")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        if self.pending >= self.max_pending:
            raise service_unavailable(f"{self.pending} prompts are waiting to be tokenized; retry later")
        self.pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        finally:
            self.pending -= 1

    def check_text_size(self, text: str, field: str) -> None:
        """400 if ``text`` has more tokens than the context holds, judged from its byte length alone."""
        if self.max_token_bytes is None:
            return
        size = len(text.encode("utf-8"))
        min_tokens = -(-size // self.max_token_bytes)
        if min_tokens > self.context_length:
            raise bad_request(f"{field}: {size} bytes of text are at least {min_tokens} tokens (a token covers at "
                              f"most {self.max_token_bytes} bytes), more than the context length "
                              f"{self.context_length}", param=field)

    async def encode(self, prompt: str | list[int], field: str) -> list[int]:
        """A text or token-id prompt as checked token ids."""
        if isinstance(prompt, str):
            return await self.encode_text(prompt, field)
        if len(prompt) > self.context_length:  # before the per-id scan: a body may carry ~10^6 ids
            raise bad_request(f"{field}: {len(prompt)} tokens exceed the context length {self.context_length}",
                              param=field)
        return self.check_ids(prompt, field)

    async def encode_text(self, text: str, field: str) -> list[int]:
        self.check_text_size(text, field)
        ids = await self._off_loop(self.tokenizer.encode, text)
        return self.check_ids(ids, field)

    async def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Render the chat template and tokenize the result, both on the tokenizer thread;
        a refusal names ``messages``."""
        field = "messages"
        if not hasattr(self.tokenizer, "apply_chat_template"):
            raise bad_request("this model's tokenizer has no chat template; use /v1/completions", param=field)
        # Rendering holds the GIL, so what cannot fit is refused before it: a chat
        # template writes every message's content and at least one token per message.
        if len(messages) > self.context_length:
            raise bad_request(f"{field}: {len(messages)} messages cannot fit the context length "
                              f"{self.context_length} (each adds at least one token)", param=field)
        self.check_text_size("".join(message["content"] for message in messages), field)
        try:
            text = await self._off_loop(self._render_chat, messages)
        except (ValueError, TypeError, TemplateError) as err:  # no template, or it refused the messages
            raise bad_request(f"{field}: the chat template could not be applied: {err}", param=field) from None
        return await self.encode_text(text, field)

    def _render_chat(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def check_ids(self, ids: list[int], field: str) -> list[int]:
        """The engine's own prompt checks (`check_prompt`), answered as a 400 naming ``field``."""
        try:
            check_prompt(ids, vocab_size=self.vocab_size, context_length=None)  # fit: the engine, with max_tokens
        except ValueError as err:
            raise bad_request(f"{field}: {err}", param=field) from None
        return list(ids)
