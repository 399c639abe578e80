"""The checks every prompt passes before it reaches a model: the one place for
them, used by the engine when it queues a request and by the server when it
admits one, so both give the same message for the same fault."""

from __future__ import annotations


def check_prompt(prompt_ids: list[int], *, vocab_size: int, context_length: int | None,
                 max_new_tokens: int = 0) -> None:
    """Raise ``ValueError`` naming the fault if ``prompt_ids`` is empty, holds an id
    outside ``[0, vocab_size)``, or with ``max_new_tokens`` more tokens would not fit
    ``context_length`` (``max_new_tokens=0``: the prompt alone, as scoring needs;
    ``context_length=None``: no fit check, for callers that learn ``max_new_tokens``
    only later, like the server's encoder before the engine admits the request)."""
    if not prompt_ids:
        raise ValueError("prompt must contain at least one token")
    bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"input_ids: token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    needed = len(prompt_ids) + max_new_tokens
    if context_length is None or needed <= context_length:
        return
    if max_new_tokens == 0:
        raise ValueError(f"prompt ({len(prompt_ids)} tokens) exceeds the context length {context_length}")
    raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) = {needed} "
                     f"exceeds the context length {context_length}")
