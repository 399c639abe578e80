"""SGLang's native ``/generate`` request, as ``sgl.RuntimeEndpoint`` sends it, and
its translation to engine jobs.

``text`` or ``input_ids`` may be one prompt or a batch; ``sampling_params``,
``return_logprob``, ``logprob_start_len`` and ``top_logprobs_num`` may be one
value for all or a list with one per prompt.  ``max_new_tokens == 0`` scores the
prompt without generating.  Options SGLang has but this engine cannot honour are
accepted only at their neutral value (400 otherwise); ``skip_special_tokens`` and
``spaces_between_special_tokens`` are accepted with any value because the
frontend always sends them, and the text is the engine's own decode.  Types are
strict (no boolean for a number, no string for a boolean), and
``top_logprobs_num`` is capped by ``--max-logprobs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..cast import SamplingParams
from .errors import bad_request
from .fields import Seed, StopStrings, StopTokenIds, Text, engine_params, refuse_unsupported
from .jobs import GenerateJob, Job, ScoreJob
from .logprobs import LogprobOptions

T = TypeVar("T")

SAMPLING_NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "min_new_tokens": (None, 0),
    "stop_regex": (None, "", []),
    "min_p": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "regex": (None,),
    "json_schema": (None,),
    "ebnf": (None,),
    "structural_tag": (None,),
    "no_stop_trim": (None, False),
    "logit_bias": (None, {}),
    "custom_params": (None,),
}
REQUEST_NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "image_data": (None, [], ""),
    "video_data": (None, [], ""),
    "audio_data": (None, [], ""),
    "input_embeds": (None,),
    "lora_path": (None,),
    "session_params": (None,),
    "session_id": (None,),
    "custom_logit_processor": (None,),
    "token_ids_logprob": (None,),
}


class NativeSamplingParams(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    max_new_tokens: int = Field(128, ge=0)
    temperature: float = Field(1.0, ge=0.0, le=100.0)  # the engine's range (SGLang sets none)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)  # -1 (or 0) disables it, as in SGLang
    stop: StopStrings | None = None
    stop_token_ids: StopTokenIds | None = None
    ignore_eos: bool = False
    n: int = Field(1, ge=1)
    sampling_seed: Seed | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True

    def check_supported(self) -> None:
        """400 for what this server does not do (n > 1, the neutral-only options), for a
        generating and a scoring prompt alike."""
        refuse_unsupported(self, SAMPLING_NEUTRAL_VALUES, "sampling_params.")
        if self.n != 1:
            raise bad_request(f"sampling_params.n: only n=1 is supported, got {self.n}", param="sampling_params.n")

    def to_engine(self) -> SamplingParams:
        return engine_params(self, self.max_new_tokens, self.sampling_seed, "sampling_params.")


@dataclass(frozen=True)
class JobSpec:
    """One prompt's job, waiting for the prompt's token ids; ``params=None`` scores
    the prompt (``max_new_tokens == 0``)."""

    params: SamplingParams | None
    logprobs: LogprobOptions | None

    def job(self, prompt_ids: list[int], prompt_field: str) -> Job:
        """400 if ``logprob_start_len`` lies past the prompt."""
        start = self.logprobs.start if self.logprobs is not None else None
        if start is not None and start > len(prompt_ids):
            raise bad_request(f"logprob_start_len ({start}) is larger than the number of input tokens "
                              f"({len(prompt_ids)})", param="logprob_start_len")
        if self.params is None:
            return ScoreJob(prompt_ids, self.logprobs, prompt_field)
        return GenerateJob(prompt_ids, self.params, logprobs=self.logprobs, prompt_field=prompt_field)


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    text: Text | list[Text] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: NativeSamplingParams | list[NativeSamplingParams] | None = None
    stream: bool = False
    return_logprob: bool | list[bool] = False
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    return_text_in_logprobs: bool = False
    rid: Text | list[Text] | None = None

    @property
    def prompt_field(self) -> str:
        return "text" if self.text is not None else "input_ids"

    def prompts(self) -> tuple[list[str | list[int]], bool]:
        """The prompts (texts or token ids), and whether the request was a batch (it
        answers with a list)."""
        if (self.text is None) == (self.input_ids is None):
            raise bad_request("exactly one of text or input_ids must be given", param="text")
        if self.text is not None:
            batch = isinstance(self.text, list)
            prompts: list[str | list[int]] = list(self.text) if batch else [self.text]
        else:
            batch = bool(self.input_ids) and isinstance(self.input_ids[0], list)
            prompts = list(self.input_ids) if batch else [self.input_ids]
        if not prompts:
            raise bad_request("text: the batch is empty", param="text")
        return prompts, batch

    def check_supported(self, batch: bool) -> None:
        refuse_unsupported(self, REQUEST_NEUTRAL_VALUES)
        if self.stream and batch:
            raise bad_request("stream: streaming is supported for a single prompt only", param="stream")

    def job_specs(self, n: int, max_top_logprobs: int) -> list[JobSpec]:
        """What to do with each of the ``n`` prompts, checked before any prompt is tokenized."""
        params = _per_prompt(self.sampling_params or NativeSamplingParams(), n, "sampling_params")
        want_logprobs = _per_prompt(self.return_logprob, n, "return_logprob")
        starts = _per_prompt(self.logprob_start_len, n, "logprob_start_len")
        tops = _per_prompt(self.top_logprobs_num, n, "top_logprobs_num")
        specs: list[JobSpec] = []
        for sp, want, start, top in zip(params, want_logprobs, starts, tops):
            options = _logprob_options(start, top, self.return_text_in_logprobs, max_top_logprobs) if want else None
            sp.check_supported()
            if sp.max_new_tokens == 0:
                specs.append(JobSpec(None, options))
            else:
                specs.append(JobSpec(sp.to_engine(), options))
        return specs

    def request_ids(self, n: int) -> list[str | None]:
        return _per_prompt(self.rid, n, "rid")


def _per_prompt(value: T | list[T], n: int, name: str) -> list[T]:
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise bad_request(f"{name}: got {len(value)} values for {n} prompts", param=name)
    return value


def _logprob_options(start: int | None, top: int | None, with_text: bool, max_top: int) -> LogprobOptions:
    if start is not None and start < -1:
        raise bad_request(f"logprob_start_len must be >= -1 (-1: output tokens only), got {start}",
                          param="logprob_start_len")
    if top is not None and top < 0:
        raise bad_request(f"top_logprobs_num must be >= 0, got {top}", param="top_logprobs_num")
    if top is not None and top > max_top:
        raise bad_request(f"top_logprobs_num: at most {max_top} alternatives per position (--max-logprobs), "
                          f"got {top}", param="top_logprobs_num")
    return LogprobOptions(start=None if start in (None, -1) else start, top_k=top or 0, with_text=with_text)
