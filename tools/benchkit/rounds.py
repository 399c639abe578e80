"""Timed decoding in interleaved rounds: what makes the tool's tokens/s comparable.

One decode per (method, batch size) is not a measurement on a shared or warming
machine: the first one pays allocator growth, lazy initialisation and compilation,
and a burst of load lands on whichever method happens to run then (plain decoding at
B=8 once measured 94 tok/s when it ran first and 180-185 tok/s in two later runs of
the same build).  So, for every batch size:

1. every method first decodes the whole workload once, untimed (the warm-up touches
   every shape the timed decodes will: each prefill length, each batch composition
   as the queue drains, the cache's full length);
2. then ``rounds`` rounds A, B, C, then C, B, A, then A, B, C, ...: one timed decode
   of the whole workload per method per round, so slow phases of the machine hit all
   methods alike, and the order alternates so that no method always runs first or
   last in a round (a fixed order can hand one method a steady bias: docs/benchmarks.md,
   "Measurement resolution");
3. a method's tokens/s is the median over its rounds, reported with every round's
   value and the spread; speedups are medians over medians of the same interleaved
   run, and each round's paired ratio is kept beside them.

The clock is `engine.timing.start_clock`: ``time.perf_counter`` on CPU, a CUDA event
pair with a device synchronisation before the clock is read on GPU.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Protocol

from sglang_cast.cast import SamplingParams, charged_ms, committed_tokens
from sglang_cast.engine import Engine, IterationRecord, StepLog
from sglang_cast.engine.timing import start_clock

MIN_ROUNDS = 3
DEFAULT_ROUNDS = 3


@dataclass(frozen=True)
class Round:
    """One decode of the whole workload by one method."""

    outputs: list[list[int]]  # new tokens per prompt
    seconds: float
    history: list[IterationRecord]  # the engine's iteration records; empty for the llama.cpp anchor
    # What the cost model charged for each of ``history``'s iterations (``cast.charged_ms``
    # on the plan it ran under): the cost model's claim, beside each record's measured step_ms.
    charged_ms: list[float] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(len(t) for t in self.outputs)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class Runner(Protocol):
    """A method ready to decode the workload: once untimed, then once per round."""

    def warm_up(self) -> None: ...

    def run(self) -> Round: ...


@dataclass(frozen=True)
class Measured:
    """Every timed round of one method, in the order they ran."""

    rounds: list[Round]

    @property
    def rates(self) -> list[float]:
        return [r.tokens_per_s for r in self.rounds]

    @property
    def tokens_per_s(self) -> float:
        """The median over rounds."""
        return statistics.median(self.rates)

    @property
    def typical(self) -> Round:
        """The round whose tokens/s is closest to the median: its tokens and iteration
        records stand for the method (greedy rounds decode identical tokens)."""
        median = self.tokens_per_s
        return min(self.rounds, key=lambda r: abs(r.tokens_per_s - median))

    def spread(self) -> dict:
        """Every round's tokens/s, their min and max, and (max - min) / median in percent."""
        rates, median = self.rates, self.tokens_per_s
        return {"tokens_per_s_rounds": rates, "tokens_per_s_min": min(rates), "tokens_per_s_max": max(rates),
                "spread_pct": 100 * (max(rates) - min(rates)) / median if median > 0 else 0.0}

    def ratios_to(self, baseline: Measured) -> list[float]:
        """Round-by-round tokens/s ratios to ``baseline`` (paired: the same round of one interleaved run)."""
        return [ours / theirs for ours, theirs in zip(self.rates, baseline.rates)]


def interleave(runners: dict[str, Runner], rounds: int) -> dict[str, Measured]:
    """Warm every runner up once, then ``rounds`` rounds running each once: the given
    order in even rounds, reversed in odd ones."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"rounds: {rounds} is fewer than {MIN_ROUNDS}")
    for runner in runners.values():
        runner.warm_up()
    timed: dict[str, list[Round]] = {label: [] for label in runners}
    order = list(runners.items())
    for index in range(rounds):
        for label, runner in order if index % 2 == 0 else order[::-1]:
            timed[label].append(runner.run())
    return {label: Measured(done) for label, done in timed.items()}


class EngineRunner:
    """One engine (a method at a batch size) decoding ``prompts`` with ``params``."""

    def __init__(self, engine: Engine, prompts: list[str], params: list[SamplingParams]) -> None:
        self.engine = engine
        self.prompts = prompts
        self.params = params
        self.device = engine.target.embed_tokens.weight.device

    def warm_up(self) -> None:
        self.engine.generate(self.prompts, self.params)

    def run(self) -> Round:
        log = StepLog()
        stop = start_clock(self.device)
        results = self.engine.generate(self.prompts, self.params, on_step=log)
        seconds = stop() / 1000
        return Round([r.token_ids for r in results], seconds, log.records, charges(log.records))


def charges(records: list[IterationRecord]) -> list[float]:
    """What the cost model charged for each iteration, on the plan it ran under; worked
    out after the clock stopped, so the timed decode does not pay for it."""
    return [charged_ms(r.plan, r.verified, max(r.accepted))[0] for r in records]


def sampling(prompts: int, temperature: float, max_new_tokens: int) -> list[SamplingParams]:
    """One seeded request per prompt: every round and method decodes the same stream."""
    return [SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=i) for i in range(prompts)]


def summarise(done: Round) -> dict:
    """The per-run metrics of docs/design/cast.md §9 from one round's iteration records."""
    history = done.history
    sequences = sum(len(r.accepted) for r in history) or 1
    return {
        "tokens": done.tokens, "seconds": done.seconds, "iterations": len(history),
        "tau": sum(committed_tokens(r.accepted) for r in history) / sequences,
        "mean_verified_tokens": sum(r.verified * len(r.accepted) for r in history) / sequences,
        "mean_depth": statistics.fmean(r.depth for r in history) if history else 0.0,
        "draft_ms": statistics.fmean(r.draft_ms for r in history) if history else 0.0,
        "verify_ms": statistics.fmean(r.verify_ms for r in history) if history else 0.0,
        # What an iteration spends outside the draft and verify clocks (batch set-up, appending and
        # detokenising the tokens): the whole step minus both, the host time issue #34 bounds.
        "host_ms": statistics.fmean(r.host_ms for r in history) if history else 0.0,
        # The whole step measured, and what the cost model charged for it (a prediction
        # checked live in the same run: their ratio is the cost model's error here).
        "step_ms": statistics.fmean(r.step_ms for r in history) if history else 0.0,
        "charged_step_ms": statistics.fmean(done.charged_ms) if done.charged_ms else None,
        "by_width": by_width(done) if done.charged_ms else None,
    }


def by_width(done: Round) -> dict[str, dict]:
    """Per verify width (tokens per sequence, root included): iterations, and the mean
    step measured against the mean step charged.  The cost of a verify steps with its
    width (the CPU's int4 kernel every 4 rows), so a mean width hides which widths the
    cost model gets wrong."""
    steps: dict[int, list[tuple[float, float]]] = {}
    for record, charged in zip(done.history, done.charged_ms):
        steps.setdefault(record.verified + 1, []).append((record.step_ms, charged))
    return {str(width): {"iterations": len(pairs), "step_ms": statistics.fmean(s for s, _ in pairs),
                         "charged_ms": statistics.fmean(c for _, c in pairs)}
            for width, pairs in sorted(steps.items())}
