"""Flag value types for argparse, shared by ``python -m sglang_cast.launch_server``,
``cast-autotune`` and the scripts under tools/.

One dialect: a value outside what a flag accepts is refused in one line that names the
accepted range and repeats what came, and argparse puts the flag in front of it::

    argument --port: expected an integer in [1, 65535], got '0'
    argument --max-queued-requests: expected an integer >= 0, got '-1'
    argument --mem-fraction-static: expected a number in (0, 1), got '1.5'
    argument --batch-sizes: expected increasing comma-separated integers in [1, 1024], got '4,2'

`OneLineParser` prints such an error (or any other argparse error) as one line and exits
with 2, argparse's code for bad usage.  Nothing here imports beyond the standard library,
so the server and every tool can use it without pulling in autotune.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

USAGE = 2  # exit code of a bad command line (argparse's)

# What one value / several values of a kind are called in the messages.
NOUNS = {int: ("an integer", "integers"), float: ("a number", "numbers")}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage dump) and still exits with 2;
    ``hint`` (empty here) follows the message."""

    hint = ""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message}{self.hint}\n")


@dataclass(frozen=True)
class Bounds:
    """The values of ``kind`` a flag accepts: ``[lo, hi]``, ``(lo, hi)`` with ``open``,
    or ``>= lo`` (``> lo`` with ``open``) without ``hi``."""

    kind: type  # int or float
    lo: float
    hi: float | None = None
    open: bool = False

    def __contains__(self, value: float) -> bool:
        above = self.lo < value if self.open else self.lo <= value
        below = self.hi is None or (value < self.hi if self.open else value <= self.hi)
        return above and below

    def __str__(self) -> str:
        """As the messages print it: integers in full, numbers with ``:g``."""
        def shown(v: float) -> str:
            return f"{v}" if self.kind is int else f"{v:g}"
        if self.hi is None:
            return f"{'>' if self.open else '>='} {shown(self.lo)}"
        ends = "()" if self.open else "[]"
        return f"in {ends[0]}{shown(self.lo)}, {shown(self.hi)}{ends[1]}"


def number(bounds: Bounds) -> Callable[[str], float]:
    """argparse type: one ``bounds.kind`` value within ``bounds``."""
    def parse(text: str):
        try:
            value = bounds.kind(text)
        except ValueError:
            value = None
        if value is None or value not in bounds:
            raise argparse.ArgumentTypeError(f"expected {NOUNS[bounds.kind][0]} {bounds}, got {text!r}")
        return value
    return parse


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    return number(Bounds(int, lo, hi))


def int_at_least(lo: int) -> Callable[[str], int]:
    return number(Bounds(int, lo))


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    return number(Bounds(float, lo, hi))


def float_between(lo: float, hi: float) -> Callable[[str], float]:
    """Both ends excluded: a fraction in (0, 1), say."""
    return number(Bounds(float, lo, hi, open=True))


def comma_list(text: str, bounds: Bounds, *, increasing: bool = False) -> tuple:
    """The one parser of comma-separated number flags: ``bounds.kind`` values within
    ``bounds``, strictly increasing if asked.  Raises ``ValueError`` saying what was
    expected and what came (tools that report errors their own way catch it)."""
    try:
        values = tuple(bounds.kind(v) for v in text.split(","))
    except ValueError:
        values = ()
    in_order = not increasing or list(values) == sorted(set(values))
    if not values or any(v not in bounds for v in values) or not in_order:
        order = "increasing " if increasing else ""
        raise ValueError(f"expected {order}comma-separated {NOUNS[bounds.kind][1]} {bounds}, got {text!r}")
    return values


def number_list(bounds: Bounds, *, increasing: bool = True) -> Callable[[str], tuple]:
    """argparse type: comma-separated values within ``bounds`` (see `comma_list`)."""
    def parse(text: str) -> tuple:
        try:
            return comma_list(text, bounds, increasing=increasing)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def int_list(lo: int, hi: int | None = None, *, increasing: bool = True) -> Callable[[str], tuple]:
    return number_list(Bounds(int, lo, hi), increasing=increasing)


def float_list(lo: float, hi: float, *, increasing: bool = True) -> Callable[[str], tuple]:
    return number_list(Bounds(float, lo, hi), increasing=increasing)
