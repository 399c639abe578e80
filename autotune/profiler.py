"""``profile``: time ``f_T`` and ``f_D`` on a grid, committed row by row.

Forwards are timed with ``ForwardTimer`` exactly as the engine runs them (CUDA
events on GPU, the monotonic clock on CPU).  A *row* — one role, batch size and
context over all its ``n`` — is timed round-robin: each round runs every ``n``
once, ``warmup`` untimed rounds first, then ``repeats`` timed ones, and each
point keeps the median and p10/p90 of its samples.  On a shared machine,
interference comes in bursts of seconds; timing point after point lets a burst
inflate some ``n`` and not others, which bends the ratio ``f(n) / f(1)`` that CAST
decides on.  Round-robin exposes every ``n`` of a row to the same bursts.

Each row's points are committed as soon as the row's last round finishes, so an
interrupted run loses at most the row in flight, and a rerun with the same setup
measures only what is missing.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from tqdm import tqdm

from sglang_cast.engine.timing import ForwardTimer, summarise
from sglang_cast.models import KVCache

from .grid import GridPoint, ProfileGrid
from .models import ModelPair
from .store import Setup, Store, utcnow

# Forwards run once per role before the first row: the first calls pay for
# allocator growth and kernel selection, which no grid point should absorb.
PROCESS_WARMUP = 3


@dataclass(frozen=True)
class ProfileReport:
    measured: int
    skipped: int  # already in the database for this setup


def forward_timer(pair: ModelPair, role: str, max_batch: int, capacity: int) -> ForwardTimer:
    """A timer for the target or draft forward with its own profiling cache."""
    config = pair.target.config
    layers = config.num_layers if role == "target" else 1
    cache = KVCache.for_model(config, max_batch, capacity, pair.device, pair.torch_dtype, num_layers=layers)
    if role == "target":
        return ForwardTimer(lambda *a: pair.target.logits(pair.target(*a).hidden), cache, config.vocab_size)
    return ForwardTimer(lambda *a: pair.draft(*a), cache, config.vocab_size, pair.feature_width)


def pending_points(store: Store, setup: Setup, grid: ProfileGrid, max_age: timedelta | None) -> list[GridPoint]:
    """Grid points without a (fresh enough) measurement for ``setup``."""
    newer_than: datetime | None = utcnow() - max_age if max_age is not None else None
    done = {(m.role, m.batch_size, m.context_len, m.n) for m in store.measurements(setup, newer_than)}
    return [p for p in grid.points() if p.key not in done]


def _time_row(timer: ForwardTimer, points: list[GridPoint], warmup: int, repeats: int) -> dict[GridPoint, list]:
    samples: dict[GridPoint, list[float]] = defaultdict(list)
    for round_index in range(warmup + repeats):
        for point in points:
            elapsed = timer.time(point.batch_size, point.context_len, point.n, warmup=0, repeats=1).median_ms
            if round_index >= warmup:
                samples[point].append(elapsed)
    return samples


def run_profile(pair: ModelPair, store: Store, setup: Setup, grid: ProfileGrid, *,
                max_age: timedelta | None = None, progress: bool = True, should_stop=lambda: False) -> ProfileReport:
    """Measure every pending point; ``should_stop`` is polled between rows (daemon)."""
    todo = pending_points(store, setup, grid, max_age)
    skipped = len(grid.points()) - len(todo)
    rows: dict[tuple[str, int, int], list[GridPoint]] = defaultdict(list)
    for point in todo:
        rows[(point.role, point.batch_size, point.context_len)].append(point)
    measured = 0
    bar = tqdm(total=len(todo), desc="profile", unit="point", disable=not progress or not todo)
    for role in ("target", "draft"):
        role_rows = {key: points for key, points in rows.items() if key[0] == role}
        if not role_rows:
            continue
        timer = forward_timer(pair, role, max(batch for _, batch, _ in role_rows),
                              max(grid.contexts) + grid.max_n_of(role))
        first = next(iter(role_rows.values()))[0]
        timer.time(first.batch_size, first.context_len, first.n, warmup=PROCESS_WARMUP, repeats=1)
        for (_, batch, context), points in role_rows.items():
            if should_stop():
                bar.close()
                return ProfileReport(measured, skipped)
            bar.set_postfix_str(f"{role} B={batch} c={context}")
            samples = _time_row(timer, points, grid.warmup, grid.repeats)
            load = os.getloadavg()[0]
            for point in points:
                store.add_measurement(setup, role, batch, context, point.n, summarise(samples[point]), load)
            measured += len(points)
            bar.update(len(points))
    bar.close()
    return ProfileReport(measured, skipped)
