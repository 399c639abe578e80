"""The tuning space of one batch-size bucket.

C1, C2 and C3 are searched log-uniformly: they are ratios of expected accepted
tokens to normalised cost, and a useful value can sit anywhere from far below 1
(keep almost everything) to far above (draft almost nothing).  Tree shape and FIFO
length are integers, and so is the prompt-lookup branch's depth (0: no branch;
`sglang_cast.cast.context_lookup`).  The space must fit inside the traces' recorded
expansion (top_k ≤ K, depth ≤ H, lookup depth ≤ the recorded branch's), or replay
would ask for children nobody recorded; ``tune`` uses only traces that cover it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import optuna

from sglang_cast.cast import BucketSettings, ContextLookup, Thresholds, TraceIteration, TreeShape
from sglang_cast.cast.settings import MAX_LOOKUP_DEPTH

from .errors import AutotuneError


@dataclass(frozen=True)
class SearchSpace:
    c_min: float = 0.01
    c_max: float = 100.0
    max_depth: int = 6  # largest depth tried (depth 1..max_depth)
    top_k: int = 8  # largest top-k tried (1..top_k)
    max_tokens: int = 64  # largest token budget m tried (2..max_tokens)
    fifo_max: int = 16  # largest FIFO length tried (1..fifo_max)
    lookup_depth: int = ContextLookup().depth  # longest prompt-lookup branch tried (0..lookup_depth; 0: never one)

    def __post_init__(self) -> None:
        if not 0 < self.c_min < self.c_max:
            raise AutotuneError(f"--c-range: expected 0 < min < max, got {self.c_min:g},{self.c_max:g}")
        for name in ("max_depth", "top_k", "fifo_max"):
            if getattr(self, name) < 1:
                raise AutotuneError(f"--{name.replace('_', '-')}: expected an integer >= 1, got {getattr(self, name)}")
        if self.max_tokens < 2:
            raise AutotuneError(f"--max-tokens: expected an integer >= 2, got {self.max_tokens}")
        if not 0 <= self.lookup_depth <= MAX_LOOKUP_DEPTH:
            raise AutotuneError(f"--max-lookup-depth: expected an integer in [0, {MAX_LOOKUP_DEPTH}], "
                                f"got {self.lookup_depth}")

    def covered_by(self, trace: TraceIteration) -> bool:
        """Can every tree of this space replay from ``trace``: its drafted expansion as
        wide and deep, its recorded lookup branch as long?"""
        return (trace.top_k >= self.top_k and trace.draft_depth >= self.max_depth
                and trace.lookup_depth >= self.lookup_depth)

    def suggest(self, trial: optuna.Trial, max_batch_size: int) -> BucketSettings:
        return BucketSettings(
            max_batch_size=max_batch_size,
            shape=TreeShape.fitted(top_k=trial.suggest_int("top_k", 1, self.top_k),
                                   max_depth=trial.suggest_int("max_depth", 1, self.max_depth),
                                   num_verify_tokens=trial.suggest_int("num_verify_tokens", 2, self.max_tokens)),
            thresholds=Thresholds(c1=trial.suggest_float("c1", self.c_min, self.c_max, log=True),
                                  c2=trial.suggest_float("c2", self.c_min, self.c_max, log=True),
                                  c3=trial.suggest_float("c3", self.c_min, self.c_max, log=True)),
            fifo_len=trial.suggest_int("fifo_len", 1, self.fifo_max),
            lookup_depth=trial.suggest_int("lookup_depth", 0, self.lookup_depth) if self.lookup_depth else 0,
        )

    def params_of(self, bucket: BucketSettings) -> dict[str, float | int] | None:
        """``bucket`` as this space's trial parameters (``suggest``'s names), or ``None``
        when it lies outside the space and so cannot be one of its trials."""
        shape, c = bucket.shape, bucket.thresholds
        params = {"top_k": shape.top_k, "max_depth": shape.max_depth, "num_verify_tokens": shape.num_verify_tokens,
                  "c1": c.c1, "c2": c.c2, "c3": c.c3, "fifo_len": bucket.fifo_len}
        inside = (shape.top_k <= self.top_k and shape.max_depth <= self.max_depth
                  and 2 <= shape.num_verify_tokens <= self.max_tokens and bucket.fifo_len <= self.fifo_max
                  and all(self.c_min <= v <= self.c_max for v in (c.c1, c.c2, c.c3))
                  and bucket.lookup_depth <= self.lookup_depth)
        if self.lookup_depth:
            params["lookup_depth"] = bucket.lookup_depth
        return params if inside else None

    def corners(self) -> list[dict[str, float | int]]:
        """Two anchor trials: the full tree (every threshold at its minimum, the
        largest shape and branch — CAST then behaves like EAGLE-2) and the smallest
        tree, without a branch."""
        big = {"top_k": self.top_k, "max_depth": self.max_depth, "num_verify_tokens": self.max_tokens,
               "c1": self.c_min, "c2": self.c_min, "c3": self.c_min, "fifo_len": self.fifo_max}
        small = {"top_k": 1, "max_depth": 1, "num_verify_tokens": 2, "c1": self.c_max, "c2": self.c_max,
                 "c3": self.c_max, "fifo_len": 1}
        if self.lookup_depth:
            big["lookup_depth"], small["lookup_depth"] = self.lookup_depth, 0
        return [big, small]


@dataclass(frozen=True)
class Grid:
    """A discretised space for the exhaustive baseline of ``bench``."""

    c_values: tuple[float, ...]
    depths: tuple[int, ...]
    top_ks: tuple[int, ...]
    budgets: tuple[int, ...]
    fifo_lens: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.c_values) ** 3 * len(self.depths) * len(self.top_ks) * len(self.budgets) * len(self.fifo_lens)

    def settings(self, max_batch_size: int):
        for c1, c2, c3, depth, top_k, budget, fifo in itertools.product(
                self.c_values, self.c_values, self.c_values, self.depths, self.top_ks, self.budgets, self.fifo_lens):
            yield BucketSettings(max_batch_size, TreeShape(top_k, depth, budget), Thresholds(c1, c2, c3), fifo)

    def space(self) -> SearchSpace:
        """The continuous space this grid discretises (what Optuna searches)."""
        return SearchSpace(c_min=min(self.c_values), c_max=max(self.c_values), max_depth=max(self.depths),
                           top_k=max(self.top_ks), max_tokens=max(self.budgets), fifo_max=max(self.fifo_lens),
                           lookup_depth=0)
