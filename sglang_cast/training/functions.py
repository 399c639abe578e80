""""Complete this function" requests: a Python signature, a docstring and doctests, the
shape of a humaneval prompt, for functions of our own.

`gap.py` found humaneval's answers restate the prompt's signature and docstring and
continue its doctests (` >>>`, indented docstring lines), which the documentation
requests never ask for. Each `FunctionSpec` here carries a reference implementation,
so every doctest's expected output is computed, not written by hand, and the target
sees examples that are right. The functions are deliberately not humaneval's; the
prompts stage still runs each request through `BenchmarkFilter`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WORDS = ("apple", "river", "stone", "cloud", "tiger", "maple", "ember", "delta", "piano", "quartz", "sun",
         "harbor", "moss", "violet", "orbit", "kite")
NAMES = ("Ada Lovelace", "Alan Mathison Turing", "Grace Hopper", "Katherine Johnson", "Edsger Dijkstra",
         "Barbara Liskov", "Donald Ervin Knuth", "Frances Allen")


@dataclass(frozen=True)
class FunctionSpec:
    """One function to complete: ``signature`` follows its name, ``doc`` is the
    docstring's first paragraph, ``draw`` makes one example's arguments and
    ``reference`` computes what the doctest expects."""

    name: str
    signature: str
    doc: str
    draw: Callable[[random.Random], tuple[Any, ...]]
    reference: Callable[..., Any]


def _ints(rng: random.Random, low: int = -9, high: int = 20, size: tuple[int, int] = (3, 7)) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(*size))]


def _words(rng: random.Random, size: tuple[int, int] = (3, 6)) -> list[str]:
    return rng.sample(WORDS, rng.randint(*size))


def _run_length(text: str) -> list[tuple[str, int]]:
    runs: list[tuple[str, int]] = []
    for ch in text:
        runs = runs[:-1] + [(ch, runs[-1][1] + 1)] if runs and runs[-1][0] == ch else runs + [(ch, 1)]
    return runs


def _longest_streak(items: list[int]) -> int:
    best = run = 0
    for i, item in enumerate(items):
        run = run + 1 if i and items[i - 1] == item else 1
        best = max(best, run)
    return best


def _interleave(first: str, second: str) -> str:
    shared = min(len(first), len(second))
    return "".join(a + b for a, b in zip(first, second)) + first[shared:] + second[shared:]


def _merge_counts(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    merged = dict(first)
    for key, value in second.items():
        merged[key] = merged.get(key, 0) + value
    return merged


def _group_by_length(words: list[str]) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {}
    for word in words:
        groups.setdefault(len(word), []).append(word)
    return groups


def _camel_name(rng: random.Random) -> str:
    parts = rng.sample(WORDS, rng.randint(2, 3))
    return parts[0] + "".join(p.title() for p in parts[1:])


SPECS: tuple[FunctionSpec, ...] = (
    FunctionSpec("running_total", "(numbers: List[int]) -> List[int]",
                 "Return the running totals of numbers: item i is the sum of the first i + 1 numbers.",
                 lambda r: (_ints(r),), lambda xs: [sum(xs[: i + 1]) for i in range(len(xs))]),
    FunctionSpec("chunk", "(items: list, size: int) -> list",
                 "Split items into consecutive lists of length size; the last one may be shorter.",
                 lambda r: (_ints(r, 0, 9, (4, 8)), r.randint(2, 3)),
                 lambda xs, n: [xs[i : i + n] for i in range(0, len(xs), n)]),
    FunctionSpec("moving_average", "(values: List[float], window: int) -> List[float]",
                 "Return the mean of every window of consecutive values, rounded to two decimals.",
                 lambda r: (_ints(r, 0, 30, (4, 7)), r.randint(2, 3)),
                 lambda xs, w: [round(sum(xs[i : i + w]) / w, 2) for i in range(len(xs) - w + 1)]),
    FunctionSpec("invert_mapping", "(mapping: dict) -> dict",
                 "Swap the keys and the values of mapping. Its values are all different.",
                 lambda r: (dict(zip(_words(r, (2, 4)), r.sample(range(1, 10), 4))),),
                 lambda m: {v: k for k, v in m.items()}),
    FunctionSpec("run_length_encode", "(text: str) -> List[Tuple[str, int]]",
                 "Encode text as (character, count) pairs, one pair per run of equal characters.",
                 lambda r: ("".join(r.choice("aab") * r.randint(1, 3) for _ in range(r.randint(2, 4))),),
                 _run_length),
    FunctionSpec("camel_to_snake", "(name: str) -> str",
                 "Convert a camelCase name to snake_case.",
                 lambda r: (_camel_name(r),),
                 lambda s: "".join("_" + c.lower() if c.isupper() else c for c in s)),
    FunctionSpec("snake_to_camel", "(name: str) -> str",
                 "Convert a snake_case name to camelCase.",
                 lambda r: ("_".join(r.sample(WORDS, r.randint(2, 3))),),
                 lambda s: s.split("_")[0] + "".join(p.title() for p in s.split("_")[1:])),
    FunctionSpec("count_long_words", "(sentence: str, n: int) -> int",
                 "Count the words of sentence that have more than n letters.",
                 lambda r: (" ".join(_words(r, (3, 6))), r.randint(3, 5)),
                 lambda s, n: sum(len(w) > n for w in s.split())),
    FunctionSpec("interleave", "(first: str, second: str) -> str",
                 "Alternate the characters of first and second, starting with first; append what is left "
                 "of the longer string.",
                 lambda r: (r.choice(WORDS), r.choice(WORDS)), _interleave),
    FunctionSpec("transpose", "(matrix: List[List[int]]) -> List[List[int]]",
                 "Return the transpose of a rectangular matrix given as a list of rows.",
                 lambda r: (lambda rows, cols: ([[r.randint(0, 9) for _ in range(cols)] for _ in range(rows)],))(
                     r.randint(2, 3), r.randint(2, 3)),
                 lambda m: [list(col) for col in zip(*m)]),
    FunctionSpec("dot_product", "(a: List[int], b: List[int]) -> int",
                 "Return the dot product of two vectors of the same length.",
                 lambda r: (lambda n: (_ints(r, -5, 9, (n, n)), _ints(r, -5, 9, (n, n))))(r.randint(2, 5)),
                 lambda a, b: sum(x * y for x, y in zip(a, b))),
    FunctionSpec("clamp_all", "(values: List[int], low: int, high: int) -> List[int]",
                 "Limit every value to the range [low, high].",
                 lambda r: (_ints(r, -20, 40), r.randint(-5, 5), r.randint(10, 20)),
                 lambda xs, lo, hi: [min(max(x, lo), hi) for x in xs]),
    FunctionSpec("rotate_left", "(items: list, k: int) -> list",
                 "Rotate items k places to the left; k may be larger than the list.",
                 lambda r: (_ints(r, 0, 9, (3, 6)), r.randint(1, 8)),
                 lambda xs, k: xs[k % len(xs):] + xs[: k % len(xs)]),
    FunctionSpec("mask_secret", "(secret: str, visible: int) -> str",
                 "Replace every character of secret but the last visible ones with '*'.",
                 lambda r: ("".join(r.choice("0123456789") for _ in range(r.randint(8, 12))), r.randint(2, 4)),
                 lambda s, v: "*" * (len(s) - v) + s[-v:]),
    FunctionSpec("parse_pairs", "(text: str) -> Dict[str, str]",
                 "Parse 'key=value' pairs separated by semicolons into a dictionary.",
                 lambda r: (";".join(f"{w}={r.randint(1, 99)}" for w in _words(r, (2, 4))),),
                 lambda s: dict(p.split("=", 1) for p in s.split(";"))),
    FunctionSpec("longest_streak", "(items: List[int]) -> int",
                 "Return the length of the longest run of equal neighbouring items.",
                 lambda r: ([r.choice((1, 2, 2, 3)) for _ in range(r.randint(4, 9))],), _longest_streak),
    FunctionSpec("pairwise_differences", "(numbers: List[int]) -> List[int]",
                 "Return the differences between neighbouring numbers: later minus earlier.",
                 lambda r: (_ints(r),), lambda xs: [b - a for a, b in zip(xs, xs[1:])]),
    FunctionSpec("merge_counts", "(first: Dict[str, int], second: Dict[str, int]) -> Dict[str, int]",
                 "Merge two word counts, adding the counts of words that appear in both.",
                 lambda r: (dict((w, r.randint(1, 5)) for w in _words(r, (2, 3))),
                            dict((w, r.randint(1, 5)) for w in _words(r, (2, 3)))), _merge_counts),
    FunctionSpec("initials", "(full_name: str) -> str",
                 "Return the initials of a full name, each followed by a dot.",
                 lambda r: (r.choice(NAMES),), lambda s: "".join(p[0] + "." for p in s.split())),
    FunctionSpec("count_leap_years", "(start: int, end: int) -> int",
                 "Count the leap years from start to end, both included, in the Gregorian calendar.",
                 lambda r: (lambda y: (y, y + r.randint(3, 120)))(r.randint(1890, 2030)),
                 lambda a, b: sum(y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) for y in range(a, b + 1))),
    FunctionSpec("percent_change", "(old: float, new: float) -> float",
                 "Return the change from old to new in percent of old, rounded to one decimal.",
                 lambda r: (r.randint(10, 400), r.randint(5, 500)), lambda a, b: round((b - a) / a * 100, 1)),
    FunctionSpec("group_by_length", "(words: List[str]) -> Dict[int, List[str]]",
                 "Group words by their length, keeping the order in which the words come.",
                 lambda r: (_words(r, (3, 6)),), _group_by_length),
    FunctionSpec("is_hex_color", "(code: str) -> bool",
                 "Check whether code is a color like '#1a2B3c': a '#' and six hexadecimal digits.",
                 lambda r: ("#" + "".join(r.choice("0123456789abcdefABCDEFgz") for _ in range(r.choice((5, 6, 6)))),),
                 lambda s: len(s) == 7 and s[0] == "#" and all(c in "0123456789abcdefABCDEF" for c in s[1:])),
    FunctionSpec("seconds_to_clock", "(seconds: int) -> str",
                 "Format a number of seconds below one day as HH:MM:SS.",
                 lambda r: (r.randint(0, 86399),),
                 lambda s: f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"),
)
INSTRUCTIONS = (
    "Complete the following Python function.",
    "Write the body of the function below so that its examples pass.",
    "Finish this code. Keep the signature and the docstring.",
    "Implement the function below.",
    "Fill in the implementation of this function and explain it briefly.",
)


def function_prompt(spec: FunctionSpec, rng: random.Random, examples: int = 2) -> str:
    """A request to complete ``spec``: an instruction, the typing import its signature
    needs, the signature and a docstring with ``examples`` doctests."""
    tests = []
    for _ in range(examples):
        args = spec.draw(rng)
        call = ", ".join(repr(a) for a in args)
        tests.append(f"    >>> {spec.name}({call})\n    {spec.reference(*args)!r}")
    typing = sorted(t for t in ("Dict", "List", "Tuple") if f"{t}[" in spec.signature)
    header = f"from typing import {', '.join(typing)}\n\n\n" if typing else ""
    quote = rng.choice(('"""', "'''"))
    return (f"{rng.choice(INSTRUCTIONS)}\n\n{header}def {spec.name}{spec.signature}:\n    {quote}{spec.doc}\n"
            + "\n".join(tests) + f"\n    {quote}\n")


def function_completion(rng: random.Random) -> str:
    return function_prompt(rng.choice(SPECS), rng)
