"""``profile``: time ``f_T`` and ``f_D`` on a grid, committed row by row.

Which forwards are timed is the backend's business, behind one small protocol
(``RoleTimer``, made by a ``TimerFactory``): the native engine's are timed with
``ForwardTimer`` exactly as the engine runs them (CUDA graph replays timed by CUDA events on a GPU, the
monotonic clock on CPU); SGLang's with ``sglang_cast.sglang_plugin.profile_forwards``.
The grid, the row schedule and the storage below are the same for both.  A *row* — one role, batch size and
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

import functools
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from tqdm import tqdm

from sglang_cast.engine.table_calibration import role_timer
from sglang_cast.engine.timing import ForwardTimer, Timing, summarise

from .grid import ROLES, GridPoint, ProfileGrid
from .models import ModelPair
from .store import Setup, Store, utcnow

# Forwards run once per role before the first row: the first calls pay for
# allocator growth and kernel selection, which no grid point should absorb.
PROCESS_WARMUP = 3


@dataclass(frozen=True)
class ProfileReport:
    measured: int
    skipped: int  # already in the database for this setup


class RoleTimer(Protocol):
    """Times one forward of one role at ``(B, c, n)``: ``B`` sequences of ``c``
    cached tokens each, ``n`` new tokens per sequence, nothing committed."""

    def time(self, batch_size: int, context_len: int, n: int, warmup: int, repeats: int) -> Timing: ...


# (role, largest batch size, largest context + n) -> a timer for that role's rows.
# Called once per role, so one role's buffers are alive at a time.
TimerFactory = Callable[[str, int, int], RoleTimer]


def forward_timer(pair: ModelPair, role: str, max_batch: int, capacity: int) -> ForwardTimer:
    """A timer for the target or draft forward of ``pair``, run as its engines run it
    (the one rule for it: `table_calibration.role_timer`, which start-up calibration uses too)."""
    return role_timer(pair.target, pair.draft, role, max_batch, capacity, pair.graph_backend)


def pending_points(store: Store, setup: Setup, grid: ProfileGrid, max_age: timedelta | None,
                   roles: tuple[str, ...] = ROLES) -> list[GridPoint]:
    """Grid points of ``roles`` without a (fresh enough) measurement for ``setup``."""
    newer_than: datetime | None = utcnow() - max_age if max_age is not None else None
    done = {(m.role, m.batch_size, m.context_len, m.n) for m in store.measurements(setup, newer_than)}
    return [p for p in grid.points() if p.role in roles and p.key not in done]


def _time_row(timer: RoleTimer, points: list[GridPoint], warmup: int, repeats: int) -> dict[GridPoint, list]:
    samples: dict[GridPoint, list[float]] = defaultdict(list)
    for round_index in range(warmup + repeats):
        for point in points:
            elapsed = timer.time(point.batch_size, point.context_len, point.n, warmup=0, repeats=1).median_ms
            if round_index >= warmup:
                samples[point].append(elapsed)
    return samples


def native_timers(pair: ModelPair) -> TimerFactory:
    """The native engine's forwards of ``pair``."""
    return functools.partial(forward_timer, pair)


def run_profile(pair: ModelPair, store: Store, setup: Setup, grid: ProfileGrid, *,
                max_age: timedelta | None = None, progress: bool = True, should_stop=lambda: False) -> ProfileReport:
    """Profile the native engine's forwards of ``pair`` (see ``profile_grid``)."""
    return profile_grid(native_timers(pair), store, setup, grid, max_age=max_age, progress=progress,
                        should_stop=should_stop)


def profile_grid(timers: TimerFactory, store: Store, setup: Setup, grid: ProfileGrid, *,
                 max_age: timedelta | None = None, progress: bool = True, should_stop=lambda: False,
                 roles: tuple[str, ...] = ROLES) -> ProfileReport:
    """Measure every pending point of ``roles`` on ``grid`` with ``timers``, row by
    row, each row committed as it finishes; ``should_stop`` is polled between rows
    (daemon).  A role left out makes no timer (its rows come from elsewhere:
    ``Store.copy_measurements``)."""
    todo = pending_points(store, setup, grid, max_age, roles)
    skipped = sum(p.role in roles for p in grid.points()) - len(todo)
    rows: dict[tuple[str, int, int], list[GridPoint]] = defaultdict(list)
    for point in todo:
        rows[(point.role, point.batch_size, point.context_len)].append(point)
    measured = 0
    bar = tqdm(total=len(todo), desc="profile", unit="point", disable=not progress or not todo)
    for role in ROLES:
        role_rows = {key: points for key, points in rows.items() if key[0] == role}
        if not role_rows:
            continue
        timer = timers(role, max(batch for _, batch, _ in role_rows), max(grid.contexts) + grid.max_n_of(role))
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
