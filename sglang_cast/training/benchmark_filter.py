"""The benchmark filter: no prompt the head is trained on equals or heavily overlaps a
benchmark prompt, so the acceptance measured on those benchmarks is not inflated by
training on them.  Every prompt source goes through `filter_prompts` before any
answer is generated.  The benchmarks' first turns are also the evaluation prompts
(`first_turns`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .workspace import read_jsonl

_NON_WORD = re.compile(r"[^0-9a-z]+")


def normalise_words(text: str) -> tuple[str, ...]:
    """Lower-cased alphanumeric words: punctuation, quotes and spacing never hide a match."""
    return tuple(word for word in _NON_WORD.split(text.lower()) if word)


def word_ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class BenchmarkFilter:
    """Flags prompts that equal or heavily overlap a benchmark prompt.

    Three tests, any one of which contaminates: the same normalised text, word-trigram
    Jaccard similarity at or above ``jaccard``, or one shared word ``shared_ngram``-gram
    (a copied sentence inside a longer prompt).  An inverted trigram index keeps the
    Jaccard test to the few benchmark prompts sharing a trigram with the candidate.
    """

    jaccard: float = 0.5
    shared_ngram: int = 8
    _exact: set[tuple[str, ...]] = field(default_factory=set)
    _trigrams: list[set[tuple[str, ...]]] = field(default_factory=list)
    _by_trigram: dict[tuple[str, ...], list[int]] = field(default_factory=dict)
    _long_ngrams: set[tuple[str, ...]] = field(default_factory=set)

    @classmethod
    def from_prompts(cls, prompts: Iterable[str], **kwargs: Any) -> BenchmarkFilter:
        index = cls(**kwargs)
        for prompt in prompts:
            index.add(prompt)
        return index

    def add(self, prompt: str) -> None:
        words = normalise_words(prompt)
        self._exact.add(words)
        trigrams = word_ngrams(words, 3)
        for gram in trigrams:
            self._by_trigram.setdefault(gram, []).append(len(self._trigrams))
        self._trigrams.append(trigrams)
        self._long_ngrams |= word_ngrams(words, self.shared_ngram)

    def reason(self, prompt: str) -> str | None:
        """Why ``prompt`` is contaminated (``exact``, ``jaccard``, ``ngram``) or ``None``."""
        words = normalise_words(prompt)
        if words in self._exact:
            return "exact"
        trigrams = word_ngrams(words, 3)
        candidates = {i for gram in trigrams for i in self._by_trigram.get(gram, ())}
        for i in candidates:
            other = self._trigrams[i]
            if len(trigrams & other) / len(trigrams | other) >= self.jaccard:
                return "jaccard"
        if word_ngrams(words, self.shared_ngram) & self._long_ngrams:
            return "ngram"
        return None


def load_benchmark_prompts(dataset_dir: Path) -> list[str]:
    """Every turn of every record of ``dataset_dir/*.jsonl`` (all turns are off limits)."""
    files = sorted(dataset_dir.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no benchmark *.jsonl files in {dataset_dir}")
    return [turn for path in files for record in read_jsonl(path) for turn in record["turns"]]


def first_turns(path: Path, limit: int) -> list[str]:
    """The first user turn of the first ``limit`` records: the evaluation prompts."""
    return [turn for turn, _ in categorised_first_turns(path, limit)]


def categorised_first_turns(path: Path, limit: int) -> list[tuple[str, str]]:
    """(first user turn, category) of the first ``limit`` records; the file's stem
    (the benchmark's name) where a record has no category."""
    return [(record["turns"][0], record.get("category", path.stem)) for record in read_jsonl(path)[:limit]]


@dataclass(frozen=True)
class FilterReport:
    kept: int
    duplicates: int
    too_long: int
    contaminated: dict[str, int]  # reason -> dropped count

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "duplicates": self.duplicates, "too_long": self.too_long,
                "contaminated": self.contaminated, "contaminated_total": sum(self.contaminated.values())}


def filter_prompts(prompts: Iterable[str], benchmark: BenchmarkFilter,
                   fits: Callable[[str], bool] = lambda prompt: True) -> tuple[list[str], FilterReport]:
    """Drop exact duplicates (normalised), prompts ``fits`` rejects, and contaminated ones."""
    kept: list[str] = []
    seen: set[tuple[str, ...]] = set()
    duplicates = too_long = 0
    contaminated = {"exact": 0, "jaccard": 0, "ngram": 0}
    for prompt in prompts:
        words = normalise_words(prompt)
        if words in seen:
            duplicates += 1
            continue
        seen.add(words)
        reason = benchmark.reason(prompt)
        if reason is not None:
            contaminated[reason] += 1
        elif not fits(prompt):
            too_long += 1
        else:
            kept.append(prompt)
    return kept, FilterReport(len(kept), duplicates, too_long, contaminated)
