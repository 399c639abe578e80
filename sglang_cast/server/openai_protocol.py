"""Request bodies of the OpenAI-compatible endpoints and their translation to the
engine's `SamplingParams`.

Fields OpenAI clients commonly send but this server cannot honour are accepted
only at their neutral value; anything else is a 400 naming the field, never a
silently ignored option.  Unknown fields are ignored, as OpenAI-compatible
servers do.  Types are strict, as OpenAI's schema is: no boolean for a number,
no string for a boolean.  ``model`` defaults to ``"default"``, SGLang's name for
whatever model is loaded.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..cast import SamplingParams
from .errors import bad_request
from .fields import Seed, StopStrings, StopTokenIds, Text, engine_params, refuse_unsupported

# Accepted only with one of these values (OpenAI field -> neutral values).
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "logit_bias": (None, {}),
    "best_of": (None, 1),
    "echo": (None, False),
    "suffix": (None, ""),
    "tools": (None, []),
    "functions": (None, []),
    "response_format": (None, {"type": "text"}),
    "min_tokens": (None, 0),
    "regex": (None,),
    "json_schema": (None,),
}


DEFAULT_MODEL_NAME = "default"  # SGLang's protocol default; always served


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True)

    include_usage: bool = False


class SamplingRequest(BaseModel):
    """Fields shared by completions and chat completions (plus SGLang's extensions
    ``top_k``, ``ignore_eos``, ``stop_token_ids``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: Text = DEFAULT_MODEL_NAME
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    n: int = Field(1, ge=1)
    seed: Seed | None = None
    stop: StopStrings | None = None
    stop_token_ids: StopTokenIds | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def check_supported(self) -> None:
        if self.n != 1:
            raise bad_request(f"n: only n=1 is supported, got {self.n}", param="n")
        refuse_unsupported(self, NEUTRAL_VALUES)

    def sampling_params(self, max_new_tokens: int) -> SamplingParams:
        return engine_params(self, max_new_tokens, self.seed)


class CompletionRequest(SamplingRequest):
    prompt: Text | list[Text] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for completions

    def single_prompt(self) -> str | list[int]:
        """The one prompt: text, or token ids."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise bad_request(f"prompt: only one prompt per request is supported, got {len(prompt)}",
                                  param="prompt")
            prompt = prompt[0]
        return prompt


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    @property
    def token_limit(self) -> int | None:
        """``max_completion_tokens`` (OpenAI's current name) wins over ``max_tokens``;
        ``None``: whatever the context leaves."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_messages(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text()} for m in self.messages]
