"""``daemon``: keep a device's profile current.

A step measures whatever grid points are missing (or older than
``profile_max_age``) and the whole-step runs of the host-overhead design that are
missing, for every weight format it was given, re-tunes each format on
all stored traces, confirms the fastest live and publishes ``profiles/<label>.yaml``,
which a running server hot-reloads (if the published format differs from the one a
server loaded, that server refuses the reload: a format change needs a restart).  Steps run at start,
every ``interval_s``, and whenever the trace count grows (someone ran ``collect``).

Closed loop with a serving instance (``DaemonConfig.server``): every poll reads the
server's live calibration (``/server_info``'s ``cast_live_calibration``, written by
sglang_cast/server/calibration.py).  When a bucket's live iterations ran further
from their predicted cost than ``margin`` (live / predicted outside ``1 ± margin``
over a full window), or the server's live gate holds off a bucket the profile says
should speculate, the daemon re-profiles every grid point (the stored costs no longer
describe this machine) and re-tunes; the server hot-reloads what it publishes.  It
acts on a drift once per served profile version: the same stale windows do not
trigger again before the server has loaded what the step published.

Stopping: SIGTERM/SIGINT only set an event.  The event is polled between
profile rows and between Optuna trials; a step that was interrupted publishes nothing,
and what it measured is already committed.  Publishing itself is atomic and
validated, so the daemon never leaves a half-written or invalid profile.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import AutotuneError
from .grid import ProfileGrid
from .models import ModelPair
from .costs import measured_costs
from .overhead import NativeStepTimer, StepDesign, run_step_profile
from .profiler import run_profile
from .report import step_counts
from .prompts import PromptSet
from .store import Setup, Store
from .workflow import TuneConfig, TuneOutcome, tune_and_publish


@dataclass(frozen=True)
class ServerWatch:
    """A serving instance whose live calibration the daemon follows."""

    url: str  # http://host:port of `python -m sglang_cast.launch_server`
    margin: float = 0.15  # live / predicted outside 1 ± margin is drift
    api_key: str | None = None  # the server's --admin-api-key (or --api-key) when /server_info is guarded
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server url must start with http:// or https://, got {self.url!r}")
        if not 0 < self.margin < 10:
            raise ValueError(f"drift margin must be in (0, 10), got {self.margin}")

    def read(self) -> dict[str, Any]:
        """``/server_info`` of the server; raises ``OSError`` (unreachable, HTTP error)
        or ``ValueError`` (not JSON)."""
        request = urllib.request.Request(self.url.rstrip("/") + "/server_info")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
            return json.loads(answer.read())


def live_drift(info: dict[str, Any], margin: float) -> list[str]:
    """One line per served bucket whose live costs left the profile's: the gate holds
    it off although the profile says speculate, or a kind's (speculative, plain) live /
    predicted ms over a full window lies outside ``1 ± margin``.  Empty: no drift."""
    calibration = info.get("cast_live_calibration")
    if not calibration:
        return []
    full = calibration["config"]["min_samples"]
    reasons = []
    for bucket in calibration["buckets"]:
        name = f"bucket <= {bucket['max_batch_size']}"
        if bucket["speculate_served"] and not bucket["speculate_live"]:
            reasons.append(f"{name}: the server's live gate switched speculation off")
            continue
        for kind in ("speculative", "plain"):
            window = bucket[kind]
            ratio = window["live_over_predicted"]
            if window["iterations"] >= full and ratio is not None and abs(ratio - 1) > margin:
                reasons.append(f"{name}: {kind} iterations ran {ratio:.2f}x their predicted ms "
                               f"(margin {margin:.0%}, {window['iterations']} iterations)")
    return reasons


@dataclass(frozen=True)
class DaemonConfig:
    tune: TuneConfig
    grid: ProfileGrid
    interval_s: float = 3600.0
    poll_s: float = 30.0
    profile_max_age: timedelta | None = None
    once: bool = False  # one step, then exit (for cron)
    server: ServerWatch | None = None  # follow a serving instance's live calibration
    overhead_warmup: int = 2  # the host-overhead step design (autotune/overhead.py StepDesign)
    overhead_steps: int = 8  # 0: no whole steps are timed; tune charges what is stored


def log(message: str) -> None:
    print(f"[cast-autotune daemon {datetime.now():%Y-%m-%d %H:%M:%S}] {message}", file=sys.stderr, flush=True)


class Daemon:
    def __init__(self, pair: ModelPair, store: Store, setup: Setup, config: DaemonConfig, prompts: PromptSet,
                 progress: bool = False, formats: dict[str, tuple[ModelPair, Setup]] | None = None) -> None:
        """``pair``/``setup`` are the fp32 reference's (traces are keyed by it);
        ``formats`` maps each weight format of ``config.tune.weight_formats`` to its
        loaded pair and measurement setup (default: the reference alone, as fp32)."""
        self.pair = pair
        self.store = store
        self.setup = setup
        self.formats = formats if formats is not None else {"fp32": (pair, setup)}
        self.config = config
        self.prompts = prompts
        self.progress = progress
        self.stop = threading.Event()
        self.published: list[TuneOutcome] = []
        self._drift_acted_on: tuple[str | None] | None = None  # (served profile version,) a step answered

    def install_signal_handlers(self) -> None:
        def request_stop(signum, _frame) -> None:
            log(f"{signal.Signals(signum).name} received: finishing the current profile row or trial, then stopping")
            self.stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    def _trace_count(self) -> int:
        return self.store.trace_count(self.pair.target_id, self.pair.draft_id, self.config.tune.dataset)

    def server_drift(self) -> list[str]:
        """The live drift of the followed server that a step should answer now (empty:
        none, already answered for the profile version it serves, no server followed,
        or the server could not be read, which is logged)."""
        watch = self.config.server
        if watch is None:
            return []
        try:
            info = watch.read()
        except (OSError, ValueError) as err:
            log(f"server {watch.url} not read ({err}); live drift not checked")
            return []
        version = (info.get("cast_profile") or {}).get("version")
        reasons = live_drift(info, watch.margin)
        if not reasons or (version,) == self._drift_acted_on:
            return []
        self._drift_acted_on = (version,)
        return reasons

    def step(self, reprofile: bool = False) -> TuneOutcome | None:
        """Profile what is missing or stale (everything with ``reprofile``: the live costs
        drifted from the stored ones), tune, confirm and publish."""
        max_age = timedelta(0) if reprofile else self.config.profile_max_age
        for fmt, (pair, setup) in self.formats.items():
            report = run_profile(pair, self.store, setup, self.config.grid, max_age=max_age,
                                 progress=self.progress, should_stop=self.stop.is_set)
            log(f"profile {fmt}: {report.measured} points measured, {report.skipped} already stored")
            if self.stop.is_set():
                return None
            self._profile_overhead(fmt, pair, setup)
            if self.stop.is_set():
                return None
        prefix = f"{self.config.tune.label}-daemon-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
        outcome = tune_and_publish(self.pair, self.store, self.setup, replace(self.config.tune, study_prefix=prefix),
                                   self.prompts, load_format=lambda fmt: self.formats[fmt][0], stop=self.stop,
                                   progress=self.progress)
        if outcome is None:
            log("stopped during tuning: nothing published")
        else:
            self.published.append(outcome)
            log(f"published {outcome.published.path} version {outcome.published.version}")
        return outcome

    def _profile_overhead(self, fmt: str, pair: ModelPair, setup: Setup) -> None:
        """Time the whole-step design (missing runs only; every run again once the
        forward tables changed under the stored steps, as after a drift's re-profile,
        those steps dropped first so the fit describes the machine as it is now)."""
        if self.config.overhead_steps == 0:
            return
        dropped = self.store.drop_steps_older_than_forwards(setup)
        if dropped:
            log(f"host overhead {fmt}: {sum(dropped.values())} stored steps dropped to re-time them "
                f"({step_counts(dropped)}; the forward tables changed)")
        design = StepDesign.for_grid(self.config.grid, self.config.overhead_warmup, self.config.overhead_steps)
        forwards = measured_costs(self.store, setup, overhead=False).costs
        report = run_step_profile(NativeStepTimer(pair, forwards), self.store, setup, self.config.grid, design,
                                  self.prompts, progress=self.progress, should_stop=self.stop.is_set)
        log(f"host overhead {fmt}: {report.runs} runs of whole steps timed, {report.skipped} already stored")
        if report.stalls():
            log(f"host overhead {fmt}: {report.stalls()}")

    def run(self) -> None:
        last_count = -1
        next_due = time.monotonic()
        while not self.stop.is_set():
            count = self._trace_count()
            drift = self.server_drift()
            if count > last_count or time.monotonic() >= next_due or drift:
                for line in drift:
                    log(f"live drift: {line}")
                if drift:
                    reason = "live drift: re-profiling every point"
                else:
                    reason = "new traces" if count > last_count >= 0 else "scheduled"
                log(f"step ({reason}; {count} traces stored)")
                try:
                    self.step(reprofile=bool(drift))
                except AutotuneError as err:  # keep the old profile and retry at the next trigger
                    log(f"step failed, previous profile kept: {err}")
                last_count = count
                next_due = time.monotonic() + self.config.interval_s
                if self.config.once:
                    break
            self.stop.wait(self.config.poll_s)
        log("stopped")
