"""Start-up calibration: a profile measured on another machine, fitted to this one.

A server (or a bench) that loads a profile tuned elsewhere times a few forwards of its
own loaded models at anchor points of the profile's tables, in seconds, and charges
its decisions against the fitted tables (`cast/table_fit.py`).  The anchors are timed
as the profiler times them (`role_timer`: eagerly, or CUDA graph replays on a GPU),
round-robin so a burst of interference touches every point alike.  The measured
anchors depend only on this machine, not on the profile: a reloaded profile is fitted
to the same anchors without timing anything again (`AnchorTimings.fit`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from ..cast import CostModel
from ..cast.table_fit import Anchor, TableCalibration, fit_tables
from ..models import KVCache
from .cuda_graphs import cache_slots, draft_step, target_step
from .runner import feature_layers, feature_width
from .timing import ForwardTimer, GraphedForwardTimer, round_robin_medians

log = logging.getLogger(__name__)

# (batch size, new tokens) per role; every other one is held out of the fit to check it.
TARGET_POINTS = ((1, 1), (1, 4), (1, 16), (4, 1), (4, 4), (16, 1))
DRAFT_POINTS = ((1, 1), (1, 4), (1, 10), (4, 1), (4, 10), (16, 10))
CONTEXT = 128  # cached tokens per sequence at every anchor: a short chat's, inside every profile's first bucket
WARMUP, REPEATS = 1, 3


def role_timer(target, draft, role: str, max_batch: int, capacity: int, graph_backend: str | None) -> ForwardTimer:
    """A timer for the target or draft forward with its own timing cache, run as the
    engine runs it: eagerly, or replaying CUDA graphs (one more cache slot, for padding)
    when ``graph_backend`` is set.  The profiler times its grid with the same timers."""
    config = target.config
    device, dtype = target.embed_tokens.weight.device, target.embed_tokens.weight.dtype
    is_target = role == "target"
    cache = KVCache.for_model(config, cache_slots(max_batch, graph_backend), capacity, device, dtype,
                              num_layers=config.num_layers if is_target else 1)
    if is_target:
        forward, features = (lambda *a: target.logits(target(*a).hidden)), 0
    else:
        forward, features = draft, feature_width(target, draft)
    if graph_backend is None:
        return ForwardTimer(forward, cache, config.vocab_size, features)
    step = target_step(target, cache, feature_layers(target, draft)) if is_target else draft_step(draft, cache)
    return GraphedForwardTimer(forward, step, cache, config.vocab_size, features, backend=graph_backend)


@dataclass(frozen=True)
class AnchorTimings:
    """The anchors timed on this machine, and how long that took."""

    anchors: tuple[Anchor, ...]
    seconds: float

    def fit(self, costs: CostModel) -> TableCalibration:
        return fit_tables(list(self.anchors), costs)


def time_anchors(target, draft, max_batch: int, graph_backend: str | None = None) -> AnchorTimings:
    """Median ms of each anchor forward (batch sizes above ``max_batch`` dropped)."""
    began = time.perf_counter()
    anchors = []
    for role, points in (("target", TARGET_POINTS), ("draft", DRAFT_POINTS)):
        points = [(b, n) for b, n in points if b <= max_batch]
        timer = role_timer(target, draft, role, max(b for b, _ in points), CONTEXT + max(n for _, n in points),
                           graph_backend)
        medians = round_robin_medians(lambda point: timer.time_once(point[0], CONTEXT, point[1]),
                                      points, warmup=WARMUP, rounds=REPEATS)
        anchors += [Anchor(role, b, CONTEXT, n, medians[(b, n)], held_out=i % 2 == 1)
                    for i, (b, n) in enumerate(points)]
    return AnchorTimings(tuple(anchors), time.perf_counter() - began)


@dataclass(frozen=True)
class StartupCalibration:
    """What start-up calibration did: the fit, the tables it serves, the report."""

    timings: AnchorTimings
    fit: TableCalibration
    costs: CostModel  # the profile's cost model with both forward tables calibrated

    def report(self, profile_costs: CostModel) -> dict[str, Any]:
        return {"seconds": round(self.timings.seconds, 2), **self.fit.to_dict(profile_costs)}


def calibrate(target, draft, costs: CostModel, max_batch: int, graph_backend: str | None = None) -> StartupCalibration:
    """Time the anchors here and fit ``costs``' tables to them; logs one line per table."""
    timings = time_anchors(target, draft, max_batch, graph_backend)
    fit = timings.fit(costs)
    for table in (fit.target, fit.draft):
        check = "no anchor held out" if table.check_error is None else f"{100 * table.check_error:.0f} %"
        log.info("calibrated the profile's %s table to this machine in %.1f s: x%.3f %+.3f ms (profile off by up "
                 "to %.0f %% at the anchors; fit off by %.0f %% at the anchors fitted, %s at those held out)",
                 table.role, timings.seconds, table.scale, table.offset_ms, 100 * table.table_error,
                 100 * table.fit_error, check)
    return StartupCalibration(timings, fit, fit.apply(costs))
