"""Prometheus metrics of one server.

Each app gets its own registry, so several servers (tests) can live in one
process.  Iteration-level histograms come from the engine's ``IterationRecord``s,
which the engine thread hands over after every step.  The live calibration's
per-bucket numbers (predicted vs live ms, speculation on/off, switches, refits) are
read from its state at scrape time (`CalibrationCollector`), so the engine thread
does no Prometheus work for them.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..engine import IterationRecord
from .calibration import LiveCalibration

TOKEN_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128)
DEPTH_BUCKETS = tuple(range(0, 13))
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)


class Throughput:
    """Generated tokens per second over a sliding window.  Written by the engine
    thread, read by the scrape, hence the lock."""

    def __init__(self, window_seconds: float = 10.0) -> None:
        self.window = window_seconds
        self._events: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def add(self, tokens: int, now: float | None = None) -> None:
        with self._lock:
            self._events.append((time.monotonic() if now is None else now, tokens))

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._events and self._events[0][0] < now - self.window:
                self._events.popleft()
            return sum(tokens for _, tokens in self._events) / self.window


KINDS = ("speculative", "plain")
WINDOW_GAUGES = (  # (window summary key, help): exported as cast_iteration_<key>
    ("live_ms", "Mean live ms of the bucket's recent iterations (engine timing)"),
    ("predicted_ms", "Mean ms the cost model charged the same iterations"),
    ("live_over_predicted", "Live ms over predicted ms of the same iterations"),
    ("tokens_per_ms", "Tokens committed per live ms over the recent iterations"),
)
GATE_COUNTERS = (  # (metric name, count key, help)
    ("cast_live_iterations", "iterations", "Iterations the live calibration observed"),
    ("cast_live_gate_switches_off", "switches_off", "Times the live gate switched the bucket's speculation "
                                                    "off (a failed probe included)"),
    ("cast_live_gate_switches_on", "switches_on", "Probes that confirmed speculation pays again"),
    ("cast_live_gate_probes", "probes", "Times a switched-off bucket speculated again to re-test"),
    ("cast_live_overhead_refits", "refits", "Live host-overhead fits of the bucket's windows (made for "
                                            "/server_info once a window of new speculative iterations arrived)"),
    ("cast_live_probe_iterations", "probe_iterations", "Speculative iterations run by probes of a switched-off "
                                                       "bucket and explorations of a profile-off one"),
)


class CalibrationCollector(Collector):
    """The live calibration's per-bucket state as metric families, labelled by the
    served bucket's ``max_batch_size`` (and ``kind``: speculative or plain)."""

    def __init__(self, calibration: LiveCalibration) -> None:
        self.calibration = calibration

    def collect(self):
        buckets = self.calibration.report(samples=False)["buckets"]
        for key, text in WINDOW_GAUGES:
            family = GaugeMetricFamily(f"cast_iteration_{key}", text, labels=["bucket", "kind"])
            for b in buckets:
                for kind in KINDS:
                    if b[kind][key] is not None:
                        family.add_metric([str(b["max_batch_size"]), kind], b[kind][key])
            yield family
        on = GaugeMetricFamily("cast_speculation_on", "1 when the bucket speculates now (served setting and "
                               "live gate), 0 when it decodes plainly", labels=["bucket"])
        for b in buckets:
            on.add_metric([str(b["max_batch_size"])], float(b["speculate_live"]))
        yield on
        extra = GaugeMetricFamily("cast_live_probe_extra_ms", "What probes and explorations cost beyond plain "
                                  "decoding committing the same tokens, ms since start (negative: they gained)",
                                  labels=["bucket"])
        for b in buckets:
            extra.add_metric([str(b["max_batch_size"])], b["probe_extra_ms"])
        yield extra
        for name, key, text in GATE_COUNTERS:
            family = CounterMetricFamily(name, text, labels=["bucket"])
            for b in buckets:
                family.add_metric([str(b["max_batch_size"])], b[key])
            yield family


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("cast_http_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.cancelled = Counter("cast_requests_cancelled", "Requests dropped before finishing: the client went "
                                 "away, the server shut down or the engine failed", registry=r)
        self.generated_tokens = Counter("cast_generated_tokens", "Tokens generated", registry=r)
        self.throughput = Throughput()
        Gauge("cast_generated_tokens_per_second", "Generated tokens per second over the last "
              f"{self.throughput.window:g} s", registry=r).set_function(self.throughput.rate)
        self.accepted = Histogram("cast_accepted_tokens_per_iteration", "Draft tokens the target accepted, "
                                  "per sequence and iteration (bonus token excluded)", buckets=TOKEN_BUCKETS,
                                  registry=r)
        self.verified = Histogram("cast_verified_tokens_per_iteration", "Draft tokens each sequence verified in "
                                  "one iteration (root excluded)", buckets=TOKEN_BUCKETS, registry=r)
        self.depth = Histogram("cast_tree_depth_per_iteration", "Depth of the draft tree per iteration",
                               buckets=DEPTH_BUCKETS, registry=r)
        self.iteration_batch = Histogram("cast_iteration_batch_size", "Sequences per speculative iteration",
                                         buckets=BATCH_BUCKETS, registry=r)
        self.batch_size = Gauge("cast_batch_size", "Requests in the running batch", registry=r)
        self.queue_length = Gauge("cast_queue_length", "Requests waiting for a batch slot", registry=r)
        self.profile = Info("cast_profile", "The CAST profile in use", registry=r)
        self.profile_reloads = Counter("cast_profile_reloads", "Profile versions swapped in by hot-reload",
                                       registry=r)
        self.profile_reload_failures = Counter("cast_profile_reload_failures", "Profile files rejected by "
                                               "hot-reload (the previous profile stayed active)", registry=r)

    def watch_calibration(self, calibration: LiveCalibration) -> None:
        self.registry.register(CalibrationCollector(calibration))

    def observe_iteration(self, record: IterationRecord) -> None:
        self.depth.observe(record.depth)
        self.verified.observe(record.verified)
        self.iteration_batch.observe(record.batch_size)
        for accepted in record.accepted:
            self.accepted.observe(accepted)

    def add_generated(self, tokens: int) -> None:
        self.generated_tokens.inc(tokens)
        self.throughput.add(tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
