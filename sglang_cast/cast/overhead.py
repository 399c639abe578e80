"""Host overhead: what an iteration costs beyond its forwards (docs/design/cast.md §2).

The forward tables ``f_T`` and ``f_D`` time the model calls alone.  A real iteration
also pays host work the forwards never see — the policy's decisions, tree
bookkeeping, building masks and positions, accept/commit per row, device syncs —
and on a small model or a launch-bound GPU that work is as large as the forwards.
Charging only the forwards made the tuner predict speed-ups that lost live.

So a profile carries one more table, measured by timing whole engine steps with a
synchronised clock and subtracting the forwards the tables charge for the same
step.  The residual is fitted per profiled batch size and context bucket with four
terms, each a rule the engine really has:

* ``plain``      — one plain-decoding iteration's host work (no draft head runs);
* ``spec_base``  — a speculative iteration's fixed host work (tree set-up, verify
  inputs, the draft's catch-up bookkeeping);
* ``per_layer``  — the host work of each draft forward that expands a layer, beyond
  the forward itself (a draft layer costs its forward plus this).  A tree of depth
  ``d`` runs ``d - 1`` such forwards: layer 1's candidates come from the previous
  iteration's catch-up, whose host work is in ``spec_base``;
* ``per_token``  — each verified draft token's host work beyond the verify forward
  (a bigger verify costs its forward plus its commit).

Four terms rather than a full (depth × verify size) grid because whole-step times
are noisy at the millisecond level: a least-squares fit over many steps is stable
where per-cell medians are not, and the four terms are what the policies charge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from .lookup import batch_row, grid_from_dict, grid_to_dict, select_bucket

TERMS = ("plain", "spec_base", "per_layer", "per_token")


@dataclass(frozen=True)
class OverheadTerms:
    """The four host terms (ms) at one batch size and context."""

    plain: float
    spec_base: float
    per_layer: float
    per_token: float

    def iteration_ms(self, depth: int, verified: int) -> float:
        """Host ms of one iteration that drafted ``depth`` layers and verified ``verified`` nodes."""
        if depth == 0:
            return self.plain
        return self.spec_base + self.per_layer * expansions(depth) + self.per_token * verified


ZERO = OverheadTerms(0.0, 0.0, 0.0, 0.0)


def expansions(depth: int) -> int:
    """Draft forwards that expand a layer in a tree of ``depth`` layers: ``depth - 1``
    (what ``IterationPlan._charge_expansion`` charges ``per_layer`` for)."""
    return max(depth - 1, 0)


@dataclass(frozen=True)
class OverheadTable:
    """``ms[b, m, t]``: term ``TERMS[t]`` for ``batch_sizes[b]`` and context bucket ``(m + 1) · bucket``.

    Batch sizes and contexts off the grid follow the forward tables' rules
    (``costs.batch_row``, ``costs.select_bucket``); every term is clamped at 0 after
    extrapolation, since host work is never negative.
    """

    bucket: int
    num_buckets: int
    batch_sizes: tuple[int, ...]
    ms: torch.Tensor
    # (B, bucket index) -> its terms: asked for at every draft layer of every iteration.
    _terms: dict[tuple[int, int], OverheadTerms] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.bucket <= 0 or self.num_buckets <= 0:
            raise ValueError(f"bucket and num_buckets must be >= 1, got {self.bucket}, {self.num_buckets}")
        if not self.batch_sizes or list(self.batch_sizes) != sorted(set(self.batch_sizes)) or self.batch_sizes[0] < 1:
            raise ValueError(f"batch_sizes must be distinct positive integers in increasing order, "
                             f"got {list(self.batch_sizes)}")
        expected = (len(self.batch_sizes), self.num_buckets, len(TERMS))
        if tuple(self.ms.shape) != expected:
            raise ValueError(f"ms must have shape [len(batch_sizes)={expected[0]}, num_buckets={expected[1]}, "
                             f"{len(TERMS)} terms {list(TERMS)}], got {list(self.ms.shape)}")
        if not torch.isfinite(self.ms).all() or (self.ms < 0).any():
            raise ValueError("ms must be finite milliseconds >= 0 everywhere")

    def terms(self, batch_size: int, context_len: int) -> OverheadTerms:
        bucket_index = select_bucket(context_len, self.bucket, self.num_buckets) // self.bucket - 1
        terms = self._terms.get((batch_size, bucket_index))
        if terms is None:
            row = batch_row(self.ms[:, bucket_index, :].double(), self.batch_sizes, batch_size).clamp(min=0.0)
            terms = self._terms[(batch_size, bucket_index)] = OverheadTerms(*(float(x) for x in row))
        return terms

    def to_dict(self) -> dict[str, Any]:
        return {**grid_to_dict(self.bucket, self.num_buckets, self.batch_sizes, self.ms), "terms": list(TERMS)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "overhead") -> OverheadTable:
        grid = grid_from_dict(data, name, "term")
        if list(data.get("terms", TERMS)) != list(TERMS):
            raise ValueError(f"{name}.terms: expected {list(TERMS)}, got {data['terms']!r}")
        try:
            return cls(*grid)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None


@dataclass(frozen=True)
class StepSample:
    """One timed whole iteration: its shape and the ms beyond what the forward tables charge."""

    batch_size: int
    context_len: int
    depth: int
    verified: int
    residual_ms: float


def _fit_cell(samples: list[StepSample]) -> list[float | None]:
    """Least squares of the residual on the four terms' indicators, terms clamped at 0.

    Design row: ``[depth == 0, depth > 0, expansions(depth), verified]`` (the last three
    zero for a plain step).  A term with no sample that exercises it is ``None`` (filled by the
    caller); a negative term is fixed at 0 and the rest refitted (an active set of one
    pass per term is enough for four terms)."""
    x = torch.tensor([[float(s.depth == 0), float(s.depth > 0), float(expansions(s.depth)), float(s.verified)]
                      for s in samples], dtype=torch.float64)
    y = torch.tensor([s.residual_ms for s in samples], dtype=torch.float64)
    free = [t for t in range(len(TERMS)) if bool((x[:, t] != 0).any())]
    # A term that never varies independently of another is not identifiable from these samples:
    # keep the columns linearly independent (a constant depth is folded into spec_base).
    kept: list[int] = []
    for t in free:
        if torch.linalg.matrix_rank(x[:, kept + [t]]) == len(kept) + 1:
            kept.append(t)
    coef = [None] * len(TERMS)
    for t in free:
        coef[t] = 0.0
    while kept:
        solution = torch.linalg.lstsq(x[:, kept], y.unsqueeze(1)).solution.squeeze(1)
        negative = [t for t, v in zip(kept, solution.tolist()) if v < 0]
        if not negative:
            for t, v in zip(kept, solution.tolist()):
                coef[t] = v
            break
        kept.remove(negative[0])
    return coef


def fit_overhead(samples: Iterable[StepSample], batch_sizes: tuple[int, ...], bucket: int,
                 num_buckets: int) -> OverheadTable:
    """The overhead table on the forward tables' grid, fitted from timed steps.

    A sample belongs to the smallest profiled batch size ``>= B`` (the last one above)
    and to its context bucket.  A cell or term no sample reaches takes the same term
    of the nearest fitted cell (same batch size first, then the nearest batch size),
    else 0."""
    cells: dict[tuple[int, int], list[StepSample]] = {}
    for s in samples:
        b = next((i for i, size in enumerate(batch_sizes) if size >= s.batch_size), len(batch_sizes) - 1)
        m = select_bucket(s.context_len, bucket, num_buckets) // bucket - 1
        cells.setdefault((b, m), []).append(s)
    fitted = {cell: _fit_cell(group) for cell, group in cells.items()}
    ms = torch.zeros(len(batch_sizes), num_buckets, len(TERMS), dtype=torch.float64)
    for b in range(len(batch_sizes)):
        for m in range(num_buckets):
            order = sorted(fitted, key=lambda cell: (abs(cell[0] - b), abs(cell[1] - m)))
            for t in range(len(TERMS)):
                value = next((fitted[cell][t] for cell in order if fitted[cell][t] is not None), 0.0)
                ms[b, m, t] = value
    return OverheadTable(bucket, num_buckets, tuple(batch_sizes), ms)
