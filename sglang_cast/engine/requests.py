"""Request state in the native engine: what was asked, what was produced, why it
stopped, and the speculative statistics a user reads back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..cast import RequestSampler, SamplingParams

REPLACEMENT_CHAR = "\ufffd"


class IncrementalText:
    """The decoded text of a growing token list, decoding only its new tail each time.

    Re-decoding a whole output after every iteration costs O(length) per step.  Here
    the text of the tokens up to ``settled`` is kept, and each update decodes only
    the tokens after it, preceded by ``CONTEXT`` settled tokens so the tokenizer sees
    their left context (a SentencePiece decoder drops the leading space of a first
    token; byte-level BPE needs nothing), and takes what follows the context's own
    text.  The text settles only when the tail does not end in an incomplete UTF-8
    sequence (U+FFFD), so a character split across tokens is decoded whole.  If the
    tail's text does not start with the context's (a decoder that rewrites across
    the boundary), the whole list is decoded instead.
    """

    CONTEXT = 4

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.settled_text = ""
        self.settled = 0  # tokens whose text is settled_text

    def update(self, ids: list[int]) -> str:
        """The text of ``ids``, which extends the list of the previous call."""
        start = max(0, self.settled - self.CONTEXT)
        context = self.decode(ids[start : self.settled])
        tail = self.decode(ids[start:])
        if not tail.startswith(context):
            return self.decode(ids)
        text = self.settled_text + tail[len(context) :]
        if not text.endswith(REPLACEMENT_CHAR):
            self.settled_text, self.settled = text, len(ids)
        return text


@dataclass
class RequestStats:
    iterations: int = 0
    accepted_draft_tokens: int = 0  # draft tokens the target accepted (bonus excluded)

    @property
    def tau(self) -> float:
        """Tokens committed per iteration (accepted + bonus)."""
        return (self.accepted_draft_tokens + self.iterations) / self.iterations if self.iterations else 0.0


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    finish_reason: str  # "stop" (EOS, stop token or stop string) or "length"
    stats: RequestStats

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class Request:
    """One sequence being decoded.  ``root`` is the last committed token, which the
    target has not seen yet: it is fed first in the next verify forward."""

    request_id: int
    prompt_ids: list[int]
    params: SamplingParams
    sampler: RequestSampler
    stop_ids: frozenset[int]  # stop_token_ids, plus EOS unless ignore_eos
    slot: int = -1
    output_ids: list[int] = field(default_factory=list)
    stats: RequestStats = field(default_factory=RequestStats)
    finish_reason: str | None = None
    matched_stop: int | str | None = None  # the stop token id or stop string that ended it (SGLang reports it)
    text: str = ""
    detokenizer: IncrementalText | None = None  # made on the first `append`

    @property
    def root(self) -> int:
        return self.output_ids[-1]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def append(self, tokens: list[int], decode) -> None:
        """Add committed tokens, stopping at a stop token, the length limit or a
        stop string (stop strings and tokens are cut from the text, as OpenAI and
        SGLang do; the token ids keep a final stop token)."""
        for token in tokens:
            self.output_ids.append(token)
            if token in self.stop_ids:
                self.finish_reason, self.matched_stop = "stop", token
                break
            if len(self.output_ids) >= self.params.max_new_tokens:
                self.finish_reason = "length"
                break
        visible = self.output_ids[:-1] if self.matched_stop is not None else self.output_ids
        if self.detokenizer is None:
            self.detokenizer = IncrementalText(decode)
        searched = len(self.detokenizer.settled_text)  # no stop string ended inside it (we would have stopped)
        self.text = self.detokenizer.update(visible)
        longest = max((len(s) for s in self.params.stop), default=0)
        begin = max(0, searched - longest + 1)
        cuts = [(i, s) for i, s in ((self.text.find(s, begin), s) for s in self.params.stop) if i >= 0]
        if cuts:
            cut, stop = min(cuts, key=lambda found: found[0])  # the first listed of those that start first
            self.text = self.text[:cut]
            self.finish_reason, self.matched_stop = "stop", stop

    def result(self) -> GenerationResult:
        return GenerationResult(self.text, list(self.output_ids), len(self.prompt_ids),
                                self.finish_reason or "length", self.stats)
