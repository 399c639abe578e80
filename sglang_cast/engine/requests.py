"""Request state in the native engine: what was asked, what was produced, why it
stopped, and the speculative statistics a user reads back."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cast import RequestSampler, SamplingParams


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
    ended_on_stop_token: bool = False
    text: str = ""

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
                self.finish_reason = "stop"
                self.ended_on_stop_token = True
                break
            if len(self.output_ids) >= self.params.max_new_tokens:
                self.finish_reason = "length"
                break
        visible = self.output_ids[:-1] if self.ended_on_stop_token else self.output_ids
        self.text = decode(visible)
        cuts = [i for i in (self.text.find(s) for s in self.params.stop) if i >= 0]
        if cuts:
            self.text = self.text[: min(cuts)]
            self.finish_reason = "stop"

    def result(self) -> GenerationResult:
        return GenerationResult(self.text, list(self.output_ids), len(self.prompt_ids),
                                self.finish_reason or "length", self.stats)
