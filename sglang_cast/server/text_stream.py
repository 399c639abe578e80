"""Incremental text for streaming: emit only what later tokens cannot change.

The engine decodes a request's output incrementally (engine/requests.py
``IncrementalText``) and cuts it at the first stop string.  Two kinds of tail are still provisional while the
request runs: an incomplete UTF-8 sequence (decoded as U+FFFD until its last
byte arrives) and a suffix that may grow into a stop string (and would then be cut
away).  Holding those back is what makes the concatenated stream equal the
non-streamed text.
"""

from __future__ import annotations

import logging

REPLACEMENT_CHAR = "\ufffd"
log = logging.getLogger(__name__)


def stable_text(text: str, stop: tuple[str, ...], finished: bool) -> str:
    """The prefix of ``text`` that is final, given the request's stop strings."""
    if finished:
        return text
    text = text.rstrip(REPLACEMENT_CHAR)
    held = max((held_back(text, s) for s in stop), default=0)
    return text[: len(text) - held]


def held_back(text: str, stop: str) -> int:
    """Length of the longest proper prefix of ``stop`` that ``text`` ends with: only
    prefixes ending in ``text``'s last character are tried (`str.rfind`), longest
    first, so a request's check stays cheap next to its iteration."""
    if not text:
        return 0
    end = text[-1]
    k = stop.rfind(end, 0, min(len(stop) - 1, len(text)))  # stop[:k + 1] ends with ``end``
    while k >= 0:
        if text.endswith(stop[: k + 1]):
            return k + 1
        k = stop.rfind(end, 0, k)
    return 0


class TextStream:
    """Turns successive full decodes of one request into deltas."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop = stop
        self.sent = ""

    def advance(self, text: str, finished: bool) -> str:
        """New stable text since the last call ("" if none)."""
        stable = stable_text(text, self.stop, finished)
        if not stable.startswith(self.sent):
            # A tokenizer whose decode is not prefix-stable rewrote text already sent;
            # wait until the text agrees again rather than send something inconsistent.
            if finished:
                log.warning("streamed text diverged from the final decode; the stream ends without the rest")
            return ""
        delta = stable[len(self.sent):]
        self.sent = stable
        return delta
