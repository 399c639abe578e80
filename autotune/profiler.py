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

Several setups profiled in one run (weight formats whose forwards are compared) are
timed the same way, row by row together: each round runs every setup's points of
the row, so the machine's drift between formats, up to 1.6x on one 2-core VM
within an hour (2026-12-04), lands on all of them alike instead of deciding which
format the tuner publishes.

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


def _time_rows(rows: list[tuple[RoleTimer, list[GridPoint]]], warmup: int,
               repeats: int) -> list[dict[GridPoint, list[float]]]:
    """Samples of each ``(timer, points)`` row, timed round-robin together: each round
    runs every row's points once, the rows in a rotating order (no setup always
    runs first after the previous row's forwards).  With several rows, each one's
    turn starts with an untimed forward of its first point: its weights are then as
    warm as when it is profiled alone, instead of its first point paying for the
    other setup's forward (which inflated ``n = 1`` of a draft row by up to 1.3x)."""
    samples: list[dict[GridPoint, list[float]]] = [defaultdict(list) for _ in rows]
    for round_index in range(warmup + repeats):
        first = round_index % len(rows)
        for index in [*range(first, len(rows)), *range(first)]:
            timer, points = rows[index]
            if len(rows) > 1:
                timer.time(points[0].batch_size, points[0].context_len, points[0].n, warmup=0, repeats=1)
            for point in points:
                elapsed = timer.time(point.batch_size, point.context_len, point.n, warmup=0, repeats=1).median_ms
                if round_index >= warmup:
                    samples[index][point].append(elapsed)
    return samples


def native_timers(pair: ModelPair) -> TimerFactory:
    """The native engine's forwards of ``pair``."""
    return functools.partial(forward_timer, pair)


def run_profile(pair: ModelPair, store: Store, setup: Setup, grid: ProfileGrid, *,
                max_age: timedelta | None = None, progress: bool = True, should_stop=lambda: False) -> ProfileReport:
    """Profile the native engine's forwards of ``pair`` (see ``profile_grid``)."""
    return profile_grid(native_timers(pair), store, setup, grid, max_age=max_age, progress=progress,
                        should_stop=should_stop)


@dataclass(frozen=True)
class GridJob:
    """One setup's share of a profile run: the roles whose rows it times, with its timers."""

    timers: TimerFactory
    setup: Setup
    roles: tuple[str, ...] = ROLES


def profile_grid(timers: TimerFactory, store: Store, setup: Setup, grid: ProfileGrid, *,
                 max_age: timedelta | None = None, progress: bool = True, should_stop=lambda: False) -> ProfileReport:
    """Measure every pending point on ``grid`` for one setup (``profile_grids``)."""
    return profile_grids([GridJob(timers, setup)], store, grid, max_age=max_age, progress=progress,
                         should_stop=should_stop)[0]


def profile_grids(jobs: list[GridJob], store: Store, grid: ProfileGrid, *, max_age: timedelta | None = None,
                  progress: bool = True, should_stop=lambda: False) -> list[ProfileReport]:
    """Measure every pending point of each job's roles on ``grid``, row by row, the jobs
    timing a row together (``_time_rows``), each row committed as it finishes;
    ``should_stop`` is polled between rows (daemon).  A role a job leaves out makes no
    timer (its rows come from elsewhere: ``Store.copy_measurements``).  Returns one
    report per job."""
    todo = [pending_points(store, job.setup, grid, max_age, job.roles) for job in jobs]
    skipped = [sum(p.role in job.roles for p in grid.points()) - len(points) for job, points in zip(jobs, todo)]
    measured = [0] * len(jobs)
    bar = tqdm(total=sum(map(len, todo)), desc="profile", unit="point", disable=not progress or not any(todo))

    def reports() -> list[ProfileReport]:
        bar.close()
        return [ProfileReport(*counts) for counts in zip(measured, skipped)]

    for role in ROLES:
        # (B, c) -> per job: its pending points of that row; rows in grid order.
        rows: dict[tuple[int, int], dict[int, list[GridPoint]]] = defaultdict(lambda: defaultdict(list))
        for index, points in enumerate(todo):
            for point in points:
                if point.role == role:
                    rows[(point.batch_size, point.context_len)][index].append(point)
        if not rows:
            continue
        timers = {index: _warm_timer(jobs[index].timers, role, grid, [p for p in todo[index] if p.role == role])
                  for index in sorted({i for row in rows.values() for i in row})}
        for (batch, context), row in rows.items():
            if should_stop():
                return reports()
            bar.set_postfix_str(f"{role} B={batch} c={context}")
            samples = _time_rows([(timers[index], points) for index, points in row.items()], grid.warmup,
                                 grid.repeats)
            load = os.getloadavg()[0]
            for (index, points), timed in zip(row.items(), samples):
                for point in points:
                    store.add_measurement(jobs[index].setup, role, batch, context, point.n, summarise(timed[point]),
                                          load)
                measured[index] += len(points)
                bar.update(len(points))
    return reports()


def _warm_timer(timers: TimerFactory, role: str, grid: ProfileGrid, points: list[GridPoint]) -> RoleTimer:
    """A timer for ``role`` sized for a job's pending ``points``, its first forwards run untimed."""
    timer = timers(role, max(p.batch_size for p in points), max(grid.contexts) + grid.max_n_of(role))
    first = points[0]
    timer.time(first.batch_size, first.context_len, first.n, warmup=PROCESS_WARMUP, repeats=1)
    return timer
