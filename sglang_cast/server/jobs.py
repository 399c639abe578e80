"""What the HTTP side hands to the engine thread, and what comes back.

Handlers build jobs from prompts already tokenized (see `prompt_encoder`); the
engine thread answers each with a short sequence of events on the job's stream:
``Accepted`` or ``Rejected`` first, then ``Delta``s, then one ``Finished`` (or
``Failed`` if the engine broke or the server stopped).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cast import SamplingParams
from .logprobs import LogprobOptions, LogprobReport


@dataclass(frozen=True)
class GenerateJob:
    """Decode one prompt (its ``max_new_tokens`` already resolved by the handler that
    tokenized it)."""

    prompt_ids: list[int]
    params: SamplingParams
    logprobs: LogprobOptions | None = None
    prompt_field: str = "prompt"  # the request field a context-length refusal names


@dataclass(frozen=True)
class ScoreJob:
    """``max_new_tokens == 0``: tokenize and optionally score the prompt, generate
    nothing (what SGLang frontends send to learn prompt lengths and to rank
    ``sgl.select`` choices)."""

    prompt_ids: list[int]
    logprobs: LogprobOptions | None = None
    prompt_field: str = "text"


Job = GenerateJob | ScoreJob


@dataclass(frozen=True)
class Outcome:
    """A finished request, everything the response formats need."""

    text: str
    output_ids: list[int]
    prompt_tokens: int
    finish_reason: str  # "stop", "length" or "abort"
    matched_stop: int | str | None  # the stop token id or stop string that ended it
    iterations: int
    accepted_draft_tokens: int
    latency_seconds: float
    logprobs: LogprobReport | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)


@dataclass(frozen=True)
class Accepted:
    prompt_tokens: int


@dataclass(frozen=True)
class Rejected:
    """The job cannot run as asked (a 400: the message names the numbers, ``param`` the field)."""

    message: str
    param: str | None = None


@dataclass(frozen=True)
class Delta:
    text: str  # newly stable text
    token_ids: list[int]  # newly committed token ids


@dataclass(frozen=True)
class Finished:
    outcome: Outcome


@dataclass(frozen=True)
class Failed:
    """The engine raised (500), or the server shut down before the job finished (503)."""

    message: str
    status: int = 500


Event = Accepted | Rejected | Delta | Finished | Failed
