"""Field types shared by the request bodies.

``Text`` is every string a client sends: JSON may carry a lone UTF-16 surrogate
(``"\\ud800"``) that is no Unicode character at all; it could not be tokenized or
written back out, so it is refused as a 400 naming the field.  ``Seed`` is the
range a sampling seed can take (torch's generator seeds are 64-bit).  Stop strings
are bounded in count and length: every running request's text is checked against
them after every iteration, on the engine's thread.
"""

from __future__ import annotations

from typing import Any, Annotated

from pydantic import AfterValidator, BaseModel, Field

from ..cast import InvalidSamplingParam, SamplingParams
from .errors import bad_request

SEED_MIN = -(1 << 63)
SEED_MAX = (1 << 64) - 1
MAX_STOP_STRINGS = 16  # checked against the text after every iteration: the count must stay small
MAX_STOP_STRING_CHARS = 1024  # and each one's length (the held-back tail is searched within it)
MAX_STOP_TOKEN_IDS = 256


def valid_unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"contains a lone surrogate (\\u{ord(text[err.start]):04x}) at character {err.start}; "
                         "strings must be valid Unicode") from None
    return text


def stop_string_length(text: str) -> str:
    if not 1 <= len(text) <= MAX_STOP_STRING_CHARS:
        raise ValueError(f"a stop string must be 1 to {MAX_STOP_STRING_CHARS} characters, got {len(text)}")
    return text


def seed_in_range(seed: int) -> int:
    if not SEED_MIN <= seed <= SEED_MAX:
        raise ValueError(f"must be an integer in [{SEED_MIN}, {SEED_MAX}] (64-bit generator seeds)")
    return seed


Text = Annotated[str, AfterValidator(valid_unicode)]
Seed = Annotated[int, AfterValidator(seed_in_range)]
StopString = Annotated[Text, AfterValidator(stop_string_length)]
StopStrings = StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)]
StopTokenIds = Annotated[list[int], Field(max_length=MAX_STOP_TOKEN_IDS)]


def refuse_unsupported(request: BaseModel, neutral: dict[str, tuple[Any, ...]], prefix: str = "") -> None:
    """400 naming the first extra field of ``request`` (under ``prefix``, e.g.
    ``"sampling_params."``) that is set to other than one of its ``neutral`` values:
    the OpenAI and SGLang options this server accepts only when they change nothing."""
    for name, value in (request.model_extra or {}).items():
        if name in neutral and value not in neutral[name]:
            raise bad_request(f"{prefix}{name}: not supported by this server (got {value!r})", param=prefix + name)


def engine_params(request: Any, max_new_tokens: int, seed: int | None, prefix: str = "") -> SamplingParams:
    """The engine's `SamplingParams` from a request's sampling fields (``temperature``,
    ``top_p``, ``top_k``, ``stop``, ``stop_token_ids``, ``ignore_eos``: one set of names
    in both APIs); top-k -1 or 0 is no cut, one stop string or a list.  A value the
    schema let through but the engine refuses is a 400 naming ``prefix`` + the field."""
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    try:
        return SamplingParams(temperature=request.temperature, top_p=request.top_p, top_k=max(request.top_k, 0),
                              max_new_tokens=max_new_tokens, stop=stop,
                              stop_token_ids=tuple(request.stop_token_ids or ()), ignore_eos=request.ignore_eos,
                              seed=seed)
    except InvalidSamplingParam as err:
        raise bad_request(f"{prefix}{err}", param=prefix + err.field) from None
