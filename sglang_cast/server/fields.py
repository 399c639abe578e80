"""Field types shared by the request bodies.

``Text`` is every string a client sends: JSON may carry a lone UTF-16 surrogate
(``"\\ud800"``) that is no Unicode character at all; it could not be tokenized or
written back out, so it is refused as a 400 naming the field.  ``Seed`` is the
range a sampling seed can take (torch's generator seeds are 64-bit).  Stop strings
are bounded in count and length: every running request's text is checked against
them after every iteration, on the engine's thread.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

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


def seed_in_range(seed: int) -> int:
    if not SEED_MIN <= seed <= SEED_MAX:
        raise ValueError(f"must be an integer in [{SEED_MIN}, {SEED_MAX}] (64-bit generator seeds)")
    return seed


Text = Annotated[str, AfterValidator(valid_unicode)]
Seed = Annotated[int, AfterValidator(seed_in_range)]
StopString = Annotated[Text, Field(min_length=1, max_length=MAX_STOP_STRING_CHARS)]
StopStrings = StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)]
StopTokenIds = Annotated[list[int], Field(max_length=MAX_STOP_TOKEN_IDS)]
