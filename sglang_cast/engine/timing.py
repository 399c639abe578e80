"""Timing one forward of the target or the draft: the measurements behind
``f_T(B, c, n)`` and ``f_D(B, c, n)`` (docs/design/cast.md §2).

A forward is timed exactly as the engine runs it: ``B`` cache slots holding ``c``
committed tokens each, ``n`` new tokens per slot written to the scratch region.
Nothing is committed, so one cache serves every grid point.  The clock is a CUDA
event pair on GPU and ``time.perf_counter`` on CPU.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from ..models.attention import causal_tree_mask
from ..models.kv_cache import KVCache
from .cuda_graphs import GraphedForward, GraphKey, pad_slot

Key = TypeVar("Key")


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int


def _quantile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def summarise(samples_ms: list[float]) -> Timing:
    ordered = sorted(samples_ms)
    return Timing(statistics.median(ordered), _quantile(ordered, 0.1), _quantile(ordered, 0.9), len(ordered))


def start_clock(device: torch.device):
    """Start timing work issued to ``device``; the returned function stops the
    clock and answers milliseconds.  On a GPU the device is synchronised on both
    sides of the interval (a CUDA event pair between two ``synchronize`` calls), so
    the interval holds exactly the work issued inside it, host time included; on the
    CPU it is ``time.perf_counter``."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        return lambda: (end.record(), torch.cuda.synchronize(device), start.elapsed_time(end))[-1]
    began = time.perf_counter()
    return lambda: 1000.0 * (time.perf_counter() - began)


class StageClock:
    """The stages of one iteration, timed with one device synchronisation in all.

    `start_clock` synchronises the device on both sides of its interval: right for
    timing one forward, but an iteration timed stage by stage that way waits for the
    device at every stage boundary, and the host cannot issue the next stage while the
    last one's kernels run.  Here each ``mark`` is a CUDA event recorded on the
    current stream (no host wait), and `read` waits once, for the last mark; on the
    CPU a mark is ``time.perf_counter``.  The clock starts with its first mark."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.mark()

    def mark(self) -> None:
        """End the current stage and begin the next."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def read(self) -> list[float]:
        """Milliseconds of each stage, in order (one fewer than the marks)."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [start.elapsed_time(end) for start, end in zip(self.marks, self.marks[1:])]
        return [1000.0 * (end - start) for start, end in zip(self.marks, self.marks[1:])]


def time_calls(call, device: torch.device, warmup: int, repeats: int) -> Timing:
    """``call()`` run ``warmup`` times untimed, then ``repeats`` times timed one by one."""
    samples = []
    for i in range(warmup + repeats):
        stop = start_clock(device)
        call()
        elapsed = stop()
        if i >= warmup:
            samples.append(elapsed)
    return summarise(samples)


def round_robin_medians(time_once: Callable[[Key], float], keys: Sequence[Key], *, warmup: int, rounds: int,
                        budget_s: float = math.inf, clock: Callable[[], float] = time.monotonic) -> dict[Key, float]:
    """Median of each key's timings, taken round-robin (each round times every key once,
    so a burst of interference touches every key alike); ``warmup`` rounds untimed.
    Stops starting rounds after ``budget_s`` of ``clock``, keeping at least one timed round."""
    samples: dict[Key, list[float]] = {key: [] for key in keys}
    began = clock()
    for index in range(warmup + rounds):
        if index > warmup and clock() - began > budget_s:
            break
        for key in samples:
            elapsed = time_once(key)
            if index >= warmup:
                samples[key].append(elapsed)
    return {key: statistics.median(times) for key, times in samples.items()}


class ForwardTimer:
    """Times ``forward(tokens, features, positions, cache, slots, mask)`` for one
    model role.  ``features_width`` is 0 for the target (no feature input)."""

    def __init__(self, forward, cache: KVCache, vocab_size: int, features_width: int = 0) -> None:
        self.forward = forward
        self.cache = cache
        self.vocab_size = vocab_size
        self.features_width = features_width
        self.device = cache.k.device
        self.dtype = cache.k.dtype

    @torch.inference_mode()
    def time(self, batch_size: int, context_len: int, n: int, warmup: int = 2, repeats: int = 7) -> Timing:
        if batch_size > self.cache.max_batch:
            raise ValueError(f"batch_size {batch_size} exceeds the timing cache's {self.cache.max_batch} slots")
        if context_len + n > self.cache.capacity:
            raise ValueError(f"context {context_len} + n {n} exceeds the cache capacity {self.cache.capacity}")
        slots = torch.arange(batch_size)  # host slots: the cache's lengths live there
        self.cache.lens[slots] = context_len
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, self.vocab_size, (batch_size, n), generator=generator).to(self.device)
        positions = context_len + torch.arange(n, device=self.device).expand(batch_size, n)
        mask = causal_tree_mask(batch_size, n, self.device)
        features = None
        if self.features_width:
            features = torch.randn(batch_size, n, self.features_width, generator=generator).to(self.device, self.dtype)
        timing = time_calls(self.call(tokens, features, positions, slots, mask), self.device, warmup, repeats)
        self.cache.lens[slots] = 0
        return timing

    def time_once(self, batch_size: int, context_len: int, n: int) -> float:
        """Milliseconds of one forward, no warm-up: one sample of a round-robin median
        (`round_robin_medians`), whose earlier rounds warm every key up."""
        return self.time(batch_size, context_len, n, warmup=0, repeats=1).median_ms

    def call(self, tokens, features, positions, slots, mask):
        """The timed call for ``[B, n]`` tokens (``features`` ``[B, n, F]`` or ``None``)."""
        args = [tokens, positions, self.cache, slots, mask]
        if features is not None:
            args.insert(1, features)
        return lambda: self.forward(*args)


class GraphedForwardTimer(ForwardTimer):
    """Times a forward as an engine with CUDA graphs runs it (engine/cuda_graphs.py):
    each ``(B, n)`` is recorded once, at its own key ``[B, n]`` over ``n`` columns,
    and each timed call copies its inputs into the static buffers and replays — what a
    decode step pays.  Timing the eager forward instead would charge a GPU step the
    launch cost of a path it does not take (H200, B = 1: 12.6 ms eager, 2.85 ms
    replayed; docs/native_gpu.md).  A graph's attention spans the whole cache, so the
    context only has to fit.  ``step`` is the engine's recorded forward over ``cache``
    (`cuda_graphs.target_step` / `draft_step`), whose last slot is the pad slot; a
    shape whose capture fails is timed eagerly, as the engine would run it."""

    def __init__(self, forward, step, cache: KVCache, vocab_size: int, features_width: int = 0, *,
                 backend: str) -> None:
        super().__init__(forward, cache, vocab_size, features_width)
        self.step, self.backend = step, backend
        self.graphs: dict[tuple[int, int], GraphedForward] = {}

    def time(self, batch_size: int, context_len: int, n: int, warmup: int = 2, repeats: int = 7) -> Timing:
        if batch_size > pad_slot(self.cache):
            raise ValueError(f"batch_size {batch_size} exceeds the timing cache's {pad_slot(self.cache)} slots "
                             "(its last slot pads graph rows)")
        return super().time(batch_size, context_len, n, warmup, repeats)

    def call(self, tokens, features, positions, slots, mask):
        batch_size, n = tokens.shape
        graphed = self.graphs.get((batch_size, n))
        if graphed is None:
            key = GraphKey(batch_size, n, n, self.features_width)
            graphed = GraphedForward(f"timer[{batch_size}x{n}]", self.step, self.cache, pad_slot(self.cache),
                                     [key], self.backend, self.dtype)
            self.graphs[(batch_size, n)] = graphed
        if not graphed.keys:  # the capture failed
            return super().call(tokens, features, positions, slots, mask)

        def replay() -> None:
            if graphed(tokens, positions, slots, mask, features) is None:
                raise RuntimeError(f"no graph covers [{batch_size}, {n}] on a {self.cache.capacity}-position cache")

        return replay


def interpolate_row(points: dict[int, float], n_max: int) -> list[float]:
    """A full ``n = 1..n_max`` row from measurements at some ``n`` (linear between
    measured points, flat-slope extension past the last one is left to CostTable)."""
    known = sorted(points)
    if known[0] != 1:
        raise ValueError("measurements must include n = 1")
    row = []
    for n in range(1, min(n_max, known[-1]) + 1):
        upper = next(k for k in known if k >= n)
        lower = max(k for k in known if k <= n)
        if upper == lower:
            row.append(points[n])
        else:
            frac = (n - lower) / (upper - lower)
            row.append(points[lower] + frac * (points[upper] - points[lower]))
    return row

