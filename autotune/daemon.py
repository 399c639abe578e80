"""``daemon``: keep a device's profile current.

A step measures whatever grid points are missing (or older than
``profile_max_age``) for every weight format it was given, re-tunes each format on
all stored traces, confirms the fastest live and publishes ``profiles/<label>.yaml``,
which a running server hot-reloads (if the published format differs from the one a
server loaded, that server refuses the reload: a format change needs a restart).  Steps run at start,
every ``interval_s``, and whenever the trace count grows (someone ran ``collect``).

Stopping: SIGTERM/SIGINT only set an event.  The event is polled between
profile rows and between Optuna trials; a step that was interrupted publishes nothing,
and what it measured is already committed.  Publishing itself is atomic and
validated, so the daemon never leaves a half-written or invalid profile.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from .errors import AutotuneError
from .grid import ProfileGrid
from .models import ModelPair
from .profiler import run_profile
from .prompts import PromptSet
from .store import Setup, Store
from .workflow import TuneConfig, TuneOutcome, tune_and_publish


@dataclass(frozen=True)
class DaemonConfig:
    tune: TuneConfig
    grid: ProfileGrid
    interval_s: float = 3600.0
    poll_s: float = 30.0
    profile_max_age: timedelta | None = None
    once: bool = False  # one step, then exit (for cron)


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

    def install_signal_handlers(self) -> None:
        def request_stop(signum, _frame) -> None:
            log(f"{signal.Signals(signum).name} received: finishing the current profile row or trial, then stopping")
            self.stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    def _trace_count(self) -> int:
        return self.store.trace_count(self.pair.target_id, self.pair.draft_id, self.config.tune.dataset)

    def step(self) -> TuneOutcome | None:
        for fmt, (pair, setup) in self.formats.items():
            report = run_profile(pair, self.store, setup, self.config.grid, max_age=self.config.profile_max_age,
                                 progress=self.progress, should_stop=self.stop.is_set)
            log(f"profile {fmt}: {report.measured} points measured, {report.skipped} already stored")
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

    def run(self) -> None:
        last_count = -1
        next_due = time.monotonic()
        while not self.stop.is_set():
            count = self._trace_count()
            if count > last_count or time.monotonic() >= next_due:
                reason = "new traces" if count > last_count >= 0 else "scheduled"
                log(f"step ({reason}; {count} traces stored)")
                try:
                    self.step()
                except AutotuneError as err:  # keep the old profile and retry at the next trigger
                    log(f"step failed, previous profile kept: {err}")
                last_count = count
                next_due = time.monotonic() + self.config.interval_s
                if self.config.once:
                    break
            self.stop.wait(self.config.poll_s)
        log("stopped")
