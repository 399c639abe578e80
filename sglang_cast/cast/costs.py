"""Measured forward-latency tables ``f(B, c, n)`` (docs/design/cast.md §2).

A table answers "how many milliseconds does one forward take for a batch of ``B``
sequences, each with ``c`` tokens of context, feeding ``n`` new tokens each".
Profiles store it on a grid: context buckets ``L, 2L, …, M·L``, ``n = 1..N`` and
a set of profiled batch sizes.  Everything off the grid is answered by the rules
of docs/design/cast.md §2 so that every engine and the offline replay agree on the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from .lookup import batch_row, grid_from_dict, grid_to_dict, select_bucket
from .overhead import ZERO, OverheadTable, OverheadTerms

# Added as ``EPS * n`` after the running max so that rows are strictly increasing,
# which Algorithm 1 needs (it divides by cost differences).
EPS = 1e-6


def _extend_linearly(row: torch.Tensor, n_max: int) -> torch.Tensor:
    """Continue a row past its last point with the slope of its last two points."""
    n_have = row.shape[-1]
    if n_max <= n_have:
        return row[..., :n_max]
    slope = row[..., -1] - row[..., -2] if n_have >= 2 else row[..., -1]
    steps = torch.arange(1, n_max - n_have + 1, dtype=row.dtype)
    return torch.cat([row, row[..., -1:] + slope.unsqueeze(-1) * steps], dim=-1)


def make_monotone(row: torch.Tensor) -> torch.Tensor:
    """Running max along ``n`` plus ``EPS·n``: noisy measurements become a strictly
    increasing cost curve without moving any point down."""
    n = torch.arange(1, row.shape[-1] + 1, dtype=row.dtype)
    return torch.cummax(row, dim=-1).values + EPS * n


@dataclass(frozen=True)
class CostTable:
    """One model's latency table.

    ``ms[b, m, k]`` is the measured median latency for ``batch_sizes[b]``, context
    bucket ``(m + 1) · bucket`` and ``n = k + 1`` new tokens per sequence.
    """

    bucket: int
    num_buckets: int
    batch_sizes: tuple[int, ...]
    ms: torch.Tensor
    # (B, bucket index) -> the cleaned row, as long as the longest asked for, as a
    # tensor and as host floats: a policy asks for the same rows at every draft layer
    # and decides on floats, and rebuilding one costs ~30-100 us.
    _rows: dict[tuple[int, int], tuple[torch.Tensor, list[float]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.bucket <= 0:
            raise ValueError(f"bucket (L) must be a positive token count, got {self.bucket}")
        if self.num_buckets <= 0:
            raise ValueError(f"num_buckets (M) must be >= 1, got {self.num_buckets}")
        if not self.batch_sizes:
            raise ValueError("batch_sizes must name at least one profiled batch size")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)) or self.batch_sizes[0] < 1:
            raise ValueError(
                f"batch_sizes must be distinct positive integers in increasing order, got {list(self.batch_sizes)}"
            )
        expected = (len(self.batch_sizes), self.num_buckets)
        if self.ms.dim() != 3 or tuple(self.ms.shape[:2]) != expected or self.ms.shape[2] < 1:
            raise ValueError(
                f"ms must have shape [len(batch_sizes)={expected[0]}, num_buckets={expected[1]}, N>=1], "
                f"got {list(self.ms.shape)}"
            )
        if not torch.isfinite(self.ms).all():
            raise ValueError("ms contains NaN or infinite latencies; re-profile the missing cells")
        if (self.ms <= 0).any():
            raise ValueError("ms must be positive milliseconds everywhere")

    @property
    def max_tokens(self) -> int:
        """``N``: the largest profiled number of new tokens per sequence."""
        return int(self.ms.shape[2])

    def select(self, context_len: int) -> int:
        return select_bucket(context_len, self.bucket, self.num_buckets)

    def _batch_row(self, batch_size: int, bucket_index: int) -> torch.Tensor:
        """Latency row over ``n`` for any batch size (docs/design/cast.md §2 batch rule)."""
        return batch_row(self.ms[:, bucket_index, :].double(), self.batch_sizes, batch_size)

    def _cached_row(self, batch_size: int, context_len: int, n_max: int) -> tuple[torch.Tensor, list[float]]:
        """The cleaned row of ``batch_size`` at ``context_len``'s bucket, at least
        ``n_max`` long.  The first ``k`` entries of a longer row are the row for ``k``
        (extension and running max only look back), so one row per batch size and
        bucket serves every ``n_max``."""
        if n_max < 1:
            raise ValueError(f"n_max must be >= 1, got {n_max}")
        bucket_index = self.select(context_len) // self.bucket - 1
        cached = self._rows.get((batch_size, bucket_index))
        if cached is None or len(cached[1]) < n_max:
            length = max(n_max, self.max_tokens)
            row = make_monotone(_extend_linearly(self._batch_row(batch_size, bucket_index), length))
            cached = self._rows[(batch_size, bucket_index)] = (row, row.tolist())
        return cached

    def row(self, batch_size: int, context_len: int, n_max: int) -> torch.Tensor:
        """Cleaned costs for ``n = 1..n_max`` (float64, strictly increasing).  A view of
        a cached row: read it, never write to it."""
        return self._cached_row(batch_size, context_len, n_max)[0][:n_max]

    def row_ms(self, batch_size: int, context_len: int, n_max: int) -> list[float]:
        """`row` as host floats, for the policies' decisions (a Python loop over a
        handful of floats beats a tensor op per step)."""
        return self._cached_row(batch_size, context_len, n_max)[1][:n_max]

    def __call__(self, batch_size: int, context_len: int, n: int) -> float:
        """``f(B, c, n)`` in milliseconds."""
        return self._cached_row(batch_size, context_len, n)[1][n - 1]

    def to_dict(self) -> dict[str, Any]:
        return grid_to_dict(self.bucket, self.num_buckets, self.batch_sizes, self.ms)

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "cost table") -> CostTable:
        """Parse a plain dict (YAML profile / DB export); errors name the field."""
        grid = grid_from_dict(data, name, "n")
        try:
            return cls(*grid)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None


@dataclass(frozen=True)
class CostModel:
    """Everything a policy charges its decisions against: the target and draft
    forward tables and, when measured, the host overhead (``cast/overhead.py``).

    The methods below are the one place where an iteration's cost is assembled from
    the tables; policies, trace replay, the plain-decoding baseline and the live
    checks all charge through them.  With no overhead table every term is 0 and
    each method reduces to the paper's forward-only cost.
    """

    target: CostTable
    draft: CostTable
    overhead: OverheadTable | None = None

    def host(self, batch_size: int, context_len: int) -> OverheadTerms:
        return ZERO if self.overhead is None else self.overhead.terms(batch_size, context_len)

    def plain_ms(self, batch_size: int, context_len: int) -> float:
        """One plain-decoding iteration: ``f_T(B, c, 1)`` plus its host work.  The unit
        every normalised cost divides by (what a token costs without speculation)."""
        return self.target(batch_size, context_len, 1) + self.host(batch_size, context_len).plain

    def draft_layer_row(self, batch_size: int, context_len: int, n_max: int) -> list[float]:
        """ms of one draft layer of ``k = 1..n_max`` rows: its forward plus the layer's host work."""
        per_layer = self.host(batch_size, context_len).per_layer
        return [ms + per_layer for ms in self.draft.row_ms(batch_size, context_len, n_max)]

    def draft_layer_ms(self, batch_size: int, context_len: int, n: int) -> float:
        return self.draft_layer_row(batch_size, context_len, n)[n - 1]

    def verify_row(self, batch_size: int, context_len: int, n_max: int) -> list[float]:
        """ms of a speculative iteration's verify over ``t = 1..n_max`` tokens (root
        included): ``f_T(B, c, t)`` plus the iteration's fixed host work plus the
        commit of ``t - 1`` verified nodes."""
        host = self.host(batch_size, context_len)
        return [ms + host.spec_base + host.per_token * t
                for t, ms in enumerate(self.target.row_ms(batch_size, context_len, n_max))]

    def to_dict(self) -> dict[str, Any]:
        out = {"target": self.target.to_dict(), "draft": self.draft.to_dict()}
        if self.overhead is not None:
            out["overhead"] = self.overhead.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "costs") -> CostModel:
        """Parse ``{target, draft[, overhead]}``; a model without ``overhead`` (profiles
        made before it existed) charges no host work (the caller warns)."""
        if not isinstance(data, dict) or "target" not in data or "draft" not in data:
            raise ValueError(f"{name}: expected a mapping with 'target' and 'draft' tables")
        unknown = sorted(set(data) - {"target", "draft", "overhead"})
        if unknown:
            raise ValueError(f"{name}: unknown field(s) {unknown}; accepted: ['draft', 'overhead', 'target']")
        overhead = data.get("overhead")
        return cls(
            target=CostTable.from_dict(data["target"], f"{name}.target"),
            draft=CostTable.from_dict(data["draft"], f"{name}.draft"),
            overhead=None if overhead is None else OverheadTable.from_dict(overhead, f"{name}.overhead"),
        )

    @classmethod
    def linear(cls, per_token_ms: float, fixed_ms: float, draft_ratio: float = 0.1,
               max_tokens: int = 64) -> CostModel:
        """A cost model ``f(n) = per_token_ms·n + fixed_ms`` (draft scaled by
        ``draft_ratio``), independent of batch and context.  Used by tests and as the
        documented fallback before a device has been profiled."""
        if not (math.isfinite(per_token_ms) and per_token_ms > 0 and math.isfinite(fixed_ms) and fixed_ms >= 0):
            raise ValueError("per_token_ms must be > 0 and fixed_ms >= 0")
        n = torch.arange(1, max_tokens + 1, dtype=torch.float64)
        row = per_token_ms * n + fixed_ms
        target = CostTable(1 << 30, 1, (1,), row.view(1, 1, -1))
        draft = CostTable(1 << 30, 1, (1,), (row * draft_ratio).view(1, 1, -1))
        return cls(target=target, draft=draft)
