"""Live calibration while serving: each iteration's charged cost against its measured
one, per bucket of the served settings, and the *live gate* that switches a bucket's
speculation off where it runs slower than plain decoding, probes it again later, and
explores profile-off buckets on at most 2 % of their iterations (docs/server.md, "Live
calibration and the live gate": the rules, the margins, the bounds).

Decisions are pure bookkeeping: the engine thread calls `LiveCalibration.observe` after
an iteration, and a changed decision takes effect through ``Policy.reconfigure`` before
the next one.  The refitted host work is exported (``/server_info``) but never written
back into the served settings: the profile stays the one source of costs, so the drift
between charged and live stays visible, and `cast-autotune daemon` re-tunes from it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property, partial
from typing import Any

from ..cast import (CostModel, IterationPlan, OverheadTerms, PolicySettings, StepSample, charged_ms, committed_tokens,
                    fit_overhead)
from .config import LiveGateConfig

log = logging.getLogger(__name__)
TINY_MS = 1e-9  # floor of a summed duration, so a rate never divides by zero


@dataclass(frozen=True)
class IterationCost:
    """One iteration as the calibration sees it (all ms).

    What the gate needs per iteration (tokens, live ms, the table's plain ms) is
    stored; what only a report or the live fit reads — the predicted ms and the ms of
    the forwards alone — is charged when first read (``charges``), so the engine
    thread does not pay a cost-model evaluation of every iteration it runs."""

    batch_size: int
    context_len: int
    depth: int  # draft layers drafted (0: plain)
    verified: int  # draft nodes verified per sequence
    tokens: int  # committed over the batch (accepted + one bonus per sequence)
    live_ms: float
    plain_ms: float  # the table's plain-decoding ms at this batch and context
    charges: Callable[[], tuple[float, float]] = field(compare=False, repr=False)  # (predicted, forwards)

    @cached_property
    def _charged(self) -> tuple[float, float]:
        return self.charges()

    @property
    def predicted_ms(self) -> float:
        return self._charged[0]

    @property
    def forwards_ms(self) -> float:
        return self._charged[1]

    @property
    def sample(self) -> StepSample:
        """The host work this iteration really did: live minus the forwards the tables charge."""
        return StepSample(self.batch_size, self.context_len, self.depth, self.verified,
                          self.live_ms - self.forwards_ms)


def iteration_cost(plan: IterationPlan, batch_size: int, context_len: int, verified: int, accepted: list[int],
                   live_ms: float) -> IterationCost:
    """One finished iteration: ``plan`` is the one it ran under (``IterationRecord.plan``),
    the rest comes from the engine's record.  A plan that drafted no layer is a plain
    iteration (its predicted ms is the plain ms)."""
    return IterationCost(batch_size, context_len, len(plan.kept), verified, committed_tokens(accepted),
                         live_ms, plan.settings.costs.plain_ms(batch_size, context_len),
                         partial(charged_ms, plan, verified, max(accepted, default=0)))


def _summary(window: deque[IterationCost]) -> dict[str, Any]:
    """Means of a window (``None`` when empty) and the ratio live / predicted."""
    n = len(window)
    if n == 0:
        return {"iterations": 0, "live_ms": None, "predicted_ms": None, "live_over_predicted": None,
                "tokens_per_ms": None}
    live = sum(c.live_ms for c in window)
    predicted = sum(c.predicted_ms for c in window)
    return {"iterations": n, "live_ms": live / n, "predicted_ms": predicted / n,
            "live_over_predicted": live / predicted if predicted > 0 else None,
            "tokens_per_ms": sum(c.tokens for c in window) / live if live > 0 else None}


def _terms_dict(terms: OverheadTerms | None) -> dict[str, float] | None:
    return None if terms is None else {name: round(getattr(terms, name), 6)
                                       for name in ("plain", "spec_base", "per_layer", "per_token")}


@dataclass
class GateCounts:
    """What the gate did in one bucket since the server started; kept across reloads,
    so the Prometheus counters built from it only ever grow."""

    iterations: int = 0
    switches_off: int = 0
    switches_on: int = 0
    probes: int = 0
    refits: int = 0
    probe_iterations: int = 0  # speculative iterations run by probes and explorations
    # What they cost beyond plain decoding committing the same tokens (negative: they gained).
    probe_extra_ms: float = 0.0


@dataclass
class BucketCalibration:
    """The windows and the gate state of one served bucket."""

    max_batch_size: int
    served_speculate: bool
    config: LiveGateConfig
    spec: deque[IterationCost] = field(init=False)
    plain: deque[IterationCost] = field(init=False)
    counts: GateCounts = field(default_factory=GateCounts)
    gated_off: bool = False
    probing: bool = False
    catching_up: bool = False  # the next speculative iteration feeds the draft its backlog
    plain_since_off: int = 0
    wait: int = 0  # plain iterations before the next probe
    iterations: int = 0  # iterations of this bucket seen since the settings were served
    last_plain_at: int | None = None
    spec_since_refit: int = 0
    live_terms: OverheadTerms | None = None
    newest: IterationCost | None = None

    def __post_init__(self) -> None:
        self.spec = deque(maxlen=self.config.window)
        self.plain = deque(maxlen=self.config.plain_window)
        self.wait = self.wait or self.base_wait
        self.gated_off = self.gated_off or self.explores  # a profile-off bucket starts off, its exploration due later

    @property
    def explores(self) -> bool:
        """A profile-off bucket the gate re-tests now and then (``explore_share``)."""
        return not self.served_speculate and self.config.switching and self.config.explore_share > 0

    @property
    def base_wait(self) -> int:
        """Plain iterations before a switched-off bucket first speculates again."""
        return self.config.explore_after if self.explores else self.config.probe_after

    @property
    def max_wait(self) -> int:
        """The longest wait failed probes double up to: ``max_probe_after``, or for
        explorations the same multiple of their first wait."""
        if not self.explores:
            return self.config.max_probe_after
        return self.base_wait * max(self.config.max_probe_after // self.config.probe_after, 1)

    @property
    def speculating(self) -> bool:
        return (self.served_speculate or self.explores) and not self.gated_off

    def plain_equivalent_ms(self, cost: IterationCost) -> float:
        """What plain decoding would have taken to commit ``cost``'s tokens (live-scaled table)."""
        return (self.plain_scale() or 1.0) * cost.plain_ms * cost.tokens / cost.batch_size

    def plain_scale(self) -> float | None:
        """Live / predicted ms of the bucket's fresh plain iterations, ``None`` when too
        few or too old (the table's plain ms is then trusted as is)."""
        fresh = (self.last_plain_at is not None
                 and self.iterations - self.last_plain_at <= self.config.plain_stale_after)
        if not fresh or len(self.plain) < self.config.min_plain_samples:
            return None
        return sum(c.live_ms for c in self.plain) / sum(c.plain_ms for c in self.plain)

    def rates(self) -> tuple[float, float]:
        """Over the speculative window: (live tokens per live ms, tokens per ms plain
        decoding would have reached on the same iterations)."""
        scale = self.plain_scale() or 1.0
        spec = sum(c.tokens for c in self.spec) / max(sum(c.live_ms for c in self.spec), TINY_MS)
        plain = sum(c.batch_size for c in self.spec) / max(scale * sum(c.plain_ms for c in self.spec), TINY_MS)
        return spec, plain

    def view(self, costs: CostModel) -> BucketView:
        """A copy of what a report shows, cheap to take under the lock (no iteration is
        charged here)."""
        newest = self.newest
        return BucketView(
            self, {
                "max_batch_size": self.max_batch_size,
                "speculate_served": self.served_speculate,
                "speculate_live": self.speculating,
                "explores": self.explores,
                "probing": self.probing,
                "plain_iterations_until_probe": max(self.wait - self.plain_since_off, 0) if self.gated_off else None,
                **dict(zip(("speculative_tokens_per_ms", "plain_tokens_per_ms"),
                           self.rates() if self.spec else (None, None))),
                "plain_rate_source": "live-scaled" if self.plain_scale() is not None else "table",
                **asdict(self.counts),
                "overhead": {"at": None if newest is None else {"batch_size": newest.batch_size,
                                                               "context_len": newest.context_len},
                             "profile": _terms_dict(None if newest is None else
                                                    costs.host(newest.batch_size, newest.context_len)),
                             "live": _terms_dict(self.live_terms)},
            }, tuple(self.spec), tuple(self.plain), self.spec_since_refit >= self.config.window)


@dataclass(frozen=True)
class BucketView:
    """One bucket's state copied under the lock.  Reading its windows charges their
    iterations (``IterationCost.predicted_ms``), outside the lock, so the engine thread
    never waits on a scrape."""

    bucket: BucketCalibration
    state: dict[str, Any]
    spec: tuple[IterationCost, ...]
    plain: tuple[IterationCost, ...]
    refit_due: bool  # ``window`` speculative iterations arrived since the last live fit

    def report(self, samples: bool) -> dict[str, Any]:
        out = {**self.state, "speculative": _summary(self.spec), "plain": _summary(self.plain)}
        if samples:
            out["step_samples"] = [asdict(c.sample) for c in (*self.spec, *self.plain)]
        return out

    def fit(self) -> OverheadTerms:
        """The bucket's live host terms, fitted from both windows with the profile's own
        fit (``cast.fit_overhead``) on one cell spanning the bucket; a term the windows
        cannot separate is folded into ``spec_base`` (the fit's rank rule)."""
        samples = [c.sample for c in (*self.spec, *self.plain)]
        size = self.bucket.max_batch_size
        return fit_overhead(samples, (size,), bucket=1 << 30, num_buckets=1).terms(size, 0)


class LiveCalibration:
    """All buckets of the served settings.  The engine thread calls :meth:`serve` and
    :meth:`observe`; HTTP handlers call :meth:`report` (hence the lock)."""

    def __init__(self, config: LiveGateConfig, settings: PolicySettings) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._served = settings
        self._buckets: dict[int, BucketCalibration] = {}
        self._counts: dict[int, GateCounts] = {}  # per max_batch_size, for the server's lifetime
        self.serve(settings)

    @property
    def served(self) -> PolicySettings:
        return self._served

    def serve(self, settings: PolicySettings) -> PolicySettings:
        """New served settings (startup, hot-reload): every window restarts, since the
        new profile predicts differently.  A bucket the gate switched off stays off
        (with its probe schedule) when the new settings keep a bucket of the same
        ``max_batch_size`` that still says ``speculate: true``: the machine that made
        speculation lose has not changed with the file, and the probe brings it back
        once live iterations confirm it pays.  Returns the settings to run."""
        with self._lock:
            old, self._buckets = self._buckets, {}
            for bucket in settings.buckets:
                counts = self._counts.setdefault(bucket.max_batch_size, GateCounts())
                calibration = BucketCalibration(bucket.max_batch_size, bucket.speculate, self.config, counts=counts)
                kept = old.get(bucket.max_batch_size)
                if kept is not None and bucket.speculate and kept.served_speculate and kept.gated_off:
                    calibration.gated_off, calibration.wait = True, kept.wait
                    calibration.plain_since_off = kept.plain_since_off
                self._buckets[bucket.max_batch_size] = calibration
            self._served = settings
            return self._effective()

    def _effective(self) -> PolicySettings:
        """The served settings with each bucket speculating as the gate decides: off where it
        holds a bucket off, on where a profile-off bucket explores or was switched on."""
        buckets = tuple(replace(b, speculate=self._buckets[b.max_batch_size].speculating)
                        for b in self._served.buckets)
        return replace(self._served, buckets=buckets)

    def observe(self, plan: IterationPlan, cost: IterationCost, saturated: bool = False) -> PolicySettings | None:
        """Take one finished iteration (``plan``: what it ran under; ``saturated``: requests
        wait for a slot, so no probe or exploration starts).  Returns the settings to run
        from the next iteration on when the gate changed a bucket, else ``None``."""
        with self._lock:
            bucket = self._buckets.get(plan.bucket.max_batch_size)
            if bucket is None:  # a plan begun before a reload swapped the buckets out
                return None
            bucket.iterations += 1
            bucket.counts.iterations += 1
            bucket.newest = cost
            if bucket.probing and cost.depth > 0:
                bucket.counts.probe_iterations += 1
                bucket.counts.probe_extra_ms += cost.live_ms - bucket.plain_equivalent_ms(cost)
            if cost.depth == 0:
                bucket.plain.append(cost)
                bucket.last_plain_at = bucket.iterations
                changed = self._count_plain(bucket, saturated)
            elif bucket.catching_up:
                # The probe's first speculative iteration also feeds the draft every token
                # committed while the bucket decoded plainly: a one-off cost, not the rate.
                bucket.catching_up, changed = False, False
            else:
                bucket.spec.append(cost)
                bucket.spec_since_refit += 1
                changed = self._judge(bucket)
            return self._effective() if changed else None

    def _count_plain(self, bucket: BucketCalibration, saturated: bool) -> bool:
        """A plain iteration of a switched-off bucket: start the probe when it is due and
        the server has room (a probe while requests queue would slow them for a test)."""
        if not bucket.gated_off:
            return False
        bucket.plain_since_off += 1
        if bucket.plain_since_off < bucket.wait or saturated:
            return False
        bucket.gated_off, bucket.probing, bucket.plain_since_off, bucket.catching_up = False, True, 0, True
        bucket.spec.clear()
        bucket.counts.probes += 1
        log.info("live gate: bucket max_batch_size=%d %s speculation after %d plain iterations",
                 bucket.max_batch_size, "explores" if bucket.explores else "probes", bucket.wait)
        return True

    def _judge(self, bucket: BucketCalibration) -> bool:
        """The gate's test on the speculative window; True when the bucket switched off."""
        if (not (self.config.switching and (bucket.served_speculate or bucket.explores)) or bucket.gated_off
                or len(bucket.spec) < self.config.min_samples):
            return False
        spec_rate, plain_rate = bucket.rates()
        source = "live-scaled" if bucket.plain_scale() is not None else "table"
        # Hysteresis: a speculating bucket stays on unless it loses by more than `margin`, a
        # probe or exploration turns it on only when it wins by at least `margin`, so noise
        # around break-even does not flap it (an exact tie with either bound speculates).
        if spec_rate >= plain_rate * (1 + self.config.margin if bucket.probing else 1 - self.config.margin):
            if bucket.probing:
                bucket.probing, bucket.wait = False, bucket.base_wait
                bucket.counts.switches_on += 1
                log.info("live gate: bucket max_batch_size=%d speculates again: %.4g tok/ms live speculative "
                         ">= %.4g tok/ms plain (%s)", bucket.max_batch_size, spec_rate, plain_rate, source)
            return False
        if bucket.probing:
            bucket.wait = min(2 * bucket.wait, bucket.max_wait)
        log.warning("live gate: bucket max_batch_size=%d switched to speculate: false: %.4g tok/ms live "
                    "speculative against %.4g tok/ms plain (%s, margin %g) over %d iterations; next probe after %d "
                    "plain iterations", bucket.max_batch_size, spec_rate, plain_rate, source, self.config.margin,
                    len(bucket.spec), bucket.wait)
        bucket.gated_off, bucket.probing, bucket.plain_since_off = True, False, 0
        bucket.counts.switches_off += 1
        bucket.spec.clear()
        return True

    def report(self, samples: bool = True) -> dict[str, Any]:
        """What ``/server_info`` shows under ``cast_live_calibration``; ``samples`` (the
        windows as ``StepSample``s, and a live fit when ``window`` new speculative
        iterations arrived since the last) is for ``/server_info``, not the scrape."""
        with self._lock:
            costs = self._served.costs
            views = [self._buckets[b.max_batch_size].view(costs) for b in self._served.buckets]
        if samples:
            views = [self._store_fit(view, view.fit()) if view.refit_due else view for view in views]
        return {"switching": self.config.switching,
                "config": {k: v for k, v in asdict(self.config).items() if k != "switching"},
                "buckets": [view.report(samples) for view in views]}

    def _store_fit(self, view: BucketView, terms: OverheadTerms) -> BucketView:
        """Keep a live fit made outside the lock; the view as it reports with it."""
        with self._lock:
            bucket = view.bucket
            bucket.live_terms, bucket.spec_since_refit = terms, 0
            bucket.counts.refits += 1
            refits = bucket.counts.refits
        overhead = {**view.state["overhead"], "live": _terms_dict(terms)}
        return replace(view, state={**view.state, "refits": refits, "overhead": overhead})
