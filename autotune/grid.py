"""Which forwards ``profile`` times: batch sizes × context buckets × ``n``.

Timing every ``n = 1..N`` for every batch size and bucket is the slow part of
profiling (a CPU forward over 64 tokens at batch 8 takes about a second).  Above
16 the cost curves are smooth between a handful of points; below it they are
staircases (the CPU's packed int4 kernel dequantises its weights once per block of
4 rows, so 5 rows cost nearly what 8 do: docs/results/2026-11-29_verify_width_amx.md),
and interpolating across a step under-charges the trees small batches verify.  So
by default every ``n`` up to 16 is timed, then a geometric subset (always
including ``N``); rows are filled in with ``interpolate_row`` when the cost tables
are built, and the database keeps only what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("target", "draft")
# Every n where small trees live (kernels step in blocks of rows there), then
# roughly geometric where the curves are near-linear.
AUTO_N = (*range(1, 17), 24, 32, 48, 64, 96, 128, 192, 256)


def n_points(max_n: int, mode: str | tuple[int, ...]) -> tuple[int, ...]:
    """The ``n`` values timed for a role with largest ``max_n``: ``"auto"`` (the
    geometric subset), ``"all"`` (1..N) or an explicit tuple (clipped to N)."""
    if mode == "all":
        chosen = set(range(1, max_n + 1))
    elif mode == "auto":
        chosen = {n for n in AUTO_N if n <= max_n}
    else:
        chosen = {n for n in mode if n <= max_n}
    return tuple(sorted(chosen | {1, max_n}))


@dataclass(frozen=True)
class GridPoint:
    role: str
    batch_size: int
    context_len: int
    n: int

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.role, self.batch_size, self.context_len, self.n)


@dataclass(frozen=True)
class ProfileGrid:
    """The measurement plan.  Context bucket ``m`` is timed at ``(m + 1) · L``, the
    boundary ``select(c)`` charges (docs/design/cast.md §2)."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    ctx_bucket: int = 512
    ctx_buckets: int = 4
    max_n: int = 64  # target: verifying k draft tokens feeds k + 1
    draft_max_n: int = 16  # draft: widest layer (top-k) or catch-up (depth + 1)
    n_mode: str | tuple[int, ...] = "auto"
    warmup: int = 2
    repeats: int = 5

    @classmethod
    def quick(cls) -> ProfileGrid:
        """A grid small enough for CI and a first look."""
        return cls(batch_sizes=(1, 2), ctx_bucket=256, ctx_buckets=1, max_n=16, draft_max_n=16,
                   n_mode=(1, 2, 4, 8, 16), warmup=1, repeats=3)

    @property
    def contexts(self) -> tuple[int, ...]:
        return tuple((m + 1) * self.ctx_bucket for m in range(self.ctx_buckets))

    def max_n_of(self, role: str) -> int:
        return self.max_n if role == "target" else self.draft_max_n

    def n_values(self, role: str) -> tuple[int, ...]:
        return n_points(self.max_n_of(role), self.n_mode)

    def points(self) -> list[GridPoint]:
        """Every point, role by role (one profiling cache alive at a time)."""
        return [GridPoint(role, b, c, n) for role in ROLES for b in self.batch_sizes for c in self.contexts
                for n in self.n_values(role)]

    def interpolated(self, role: str) -> list[int]:
        """The ``n`` in 1..N that are filled in by interpolation, not timed."""
        timed = set(self.n_values(role))
        return [n for n in range(1, self.max_n_of(role) + 1) if n not in timed]
