"""Prometheus metrics of one server.

Each app gets its own registry, so several servers (tests) can live in one
process.  Iteration-level histograms come from the engine's ``IterationRecord``s,
which the engine thread hands over after every step.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from ..engine import IterationRecord

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
