"""Timing whole engine steps: the measurements behind the host-overhead table
(``sglang_cast/cast/overhead.py``, docs/design/cast.md §2).

The forward tables time the model calls alone; an iteration also pays host work
(the policy's decisions, tree bookkeeping, masks and positions, accept/commit per
row, syncs).  Here a step is timed whole — ``Engine.step()`` between two reads of
``start_clock``, which synchronises the device on both sides — and the forwards the
tables charge for that very step (``cast.charged_ms`` on the step's own plan
``IterationRecord.plan``, its forwards part) are subtracted.
What is left is one ``StepSample``; ``cast.fit_overhead`` turns many of them into
the four host terms.

``profile`` runs a small *step design* per profiled batch size: plain decoding and
EAGLE-2 trees of a few shapes that vary the drafted depth (1..H) independently of
the verified count (a top-1 chain verifies one node per layer, a top-K tree many),
so the fit can tell ``per_layer`` from ``per_token``.  Steps that admitted a request
(a prefill) and the first ``warmup`` steps of each run (first use of its shapes) are
not timed; a run with a stall inside it is timed again (`steady_run`).  The prompts
are ``autotune/prompts.txt`` (or ``--dataset``), never the benchmark sets.  The runs
go through a ``StepTimer``: ``NativeStepTimer`` here, SGLang engines running the CAST
worker for ``--backend sglang`` (``sglang_plugin.profile_steps``).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from tqdm import tqdm

from sglang_cast.cast import CostModel, CostTable, PolicySettings, SamplingParams, TreeShape, charged_ms, make_policy
from sglang_cast.engine import Engine
from sglang_cast.engine.timing import start_clock

from .grid import ProfileGrid
from .models import ModelPair
from .profiler import forward_timer
from .prompts import PromptSet
from .store import Setup, Store, TimedStep

PLAIN = "plain"  # the shape key of plain-decoding runs
PROFILE, LIVE = "profile", "live"  # where stored steps come from
DESIGN_DEPTH = 6  # deepest tree of the step design (EAGLE-2's default depth), within the draft grid
DESIGN_TOP_K = 4  # width of the design's wide trees, within the draft grid
CALIBRATION_REPEATS = 5  # reference forwards timed on each side of a run
# A run repeats one shape on nearly the same context, so its steps take nearly the same
# time; one that took this many times the fastest waited on something else (another
# tenant, a page-in): the run is timed again, up to RETIMES more times.
UNSTEADY_RATIO = 2.0
RETIMES = 2


def shape_key(shape: TreeShape | None) -> str:
    return PLAIN if shape is None else f"k{shape.top_k}-d{shape.max_depth}-m{shape.num_verify_tokens}"


@dataclass(frozen=True)
class StepDesign:
    """Which steps ``profile`` times per batch size: plain decoding, then each
    EAGLE-2 ``shape``; ``warmup`` untimed steps and ``steps`` timed ones per run."""

    shapes: tuple[TreeShape, ...]
    warmup: int = 2
    steps: int = 8

    @classmethod
    def for_grid(cls, grid: ProfileGrid, warmup: int = 2, steps: int = 8) -> StepDesign:
        """Per depth ``d = 1..H``: a top-1 chain (``d`` nodes verified) and a top-``K``
        tree verifying up to ``K·d`` nodes.  Every forward they run is inside the
        grid: layers of ``K`` rows and catch-ups of ``d + 1`` on the draft grid,
        verifies of ``m`` tokens on the target grid."""
        depth = max(1, min(DESIGN_DEPTH, grid.draft_max_n - 1, grid.max_n - 1))
        top_k = max(1, min(DESIGN_TOP_K, grid.draft_max_n))
        shapes: dict[str, TreeShape] = {}
        for d in range(1, depth + 1):
            for shape in (TreeShape(1, d, d + 1), TreeShape(top_k, d, min(grid.max_n, 1 + top_k * d))):
                shapes.setdefault(shape_key(shape), shape)
        return cls(tuple(shapes.values()), warmup, steps)

    def runs(self) -> tuple[TreeShape | None, ...]:
        """Plain decoding first, then every shape."""
        return (None, *self.shapes)


def step_charge_ms(step: TimedStep, costs: CostModel) -> float:
    """What ``costs`` charge for a timed step: its forwards (``forward_ms``, from the
    forward tables) plus the host work the overhead table fits for its batch size,
    context, depth and verified count.  Over the same steps as a live run, it sets the
    cost model against the clock whatever the run's mix of batch sizes and depths."""
    return step.forward_ms + costs.host(step.batch_size, step.context_len).iteration_ms(step.depth, step.verified)


def run_steps(engine: Engine, prompts: list[str], params: SamplingParams, warmup: int = 0,
              limit: int | None = None) -> list[TimedStep]:
    """Decode ``prompts`` on ``engine`` step by step, timing each whole step with a
    device-synchronised clock.  Steps that admitted a request (they include its
    prefill) are left out, as are the first ``warmup`` others; at most ``limit``
    steps are timed, then the unfinished requests are dropped."""
    requests = [engine.add_request(p, params) for p in prompts]
    device = engine.runner.device
    timed: list[TimedStep] = []
    ran = 0
    try:
        while engine.has_work and (limit is None or len(timed) < limit):
            waiting = len(engine.waiting)
            stop = start_clock(device)
            step = engine.step()
            elapsed = stop()
            if step.record is None or len(engine.waiting) != waiting:
                continue
            ran += 1
            if ran <= warmup:
                continue
            record = step.record
            plan = record.plan
            timed.append(TimedStep(record.batch_size, record.context_len, len(plan.kept), record.verified,
                                   sum(record.accepted) + record.batch_size, elapsed,
                                   charged_ms(plan, record.verified, max(record.accepted))[1]))
    finally:
        for request in requests:
            if not request.finished:
                engine.cancel(request)
    return timed


class StepTimer(Protocol):
    """Runs one batch of the step design on some engine and returns its timed steps."""

    def time(self, batch_size: int, shape: TreeShape | None, texts: list[str], new_tokens: int,
             design: StepDesign) -> list[TimedStep]: ...


def reference_ms(pair: ModelPair, batch_size: int, context: int) -> float:
    """``f_T(B, c, 1)`` timed now: the reference forward a run's speed is read from."""
    timer = forward_timer(pair, "target", batch_size, context + 1)
    return timer.time(batch_size, context, 1, warmup=1, repeats=CALIBRATION_REPEATS).median_ms


def reference_point(table: CostTable, batch_size: int, context_len: int) -> tuple[int, float]:
    """Where a run at ``context_len`` is compared with its table: the profiled context of
    its bucket (the boundary it is charged at, ``CostTable.select``) and the table's
    ``f_T(B, c, 1)`` there.  The boundary itself is looked up as ``c - 1``: ``select``
    maps a context to the first boundary above it, so the boundary's own row is that of
    the contexts below it (looking up ``c`` read the next bucket's row, 18 % slower at
    B = 32 on the AMX Xeon, and biased every speed factor at large batch sizes)."""
    context = table.select(context_len)
    return context, table(batch_size, context - 1, 1)


def speed_factor(before_ms: float, after_ms: float, table_ms: float) -> float:
    """How much slower than when its table was profiled the machine ran a run: the
    reference forward timed before and after it (geometric mean) over the table's value."""
    return math.sqrt(before_ms * after_ms) / table_ms


def at_speed(steps: list[TimedStep], factor: float) -> list[TimedStep]:
    """``steps`` as they would have run at the forward tables' speed: a machine ``factor``
    times slower runs host work and forwards alike slower, so the residual a fit reads
    stays host work instead of the drift between the two measurements."""
    return [replace(s, step_ms=s.step_ms / factor) for s in steps]


class NativeStepTimer:
    """The design on this project's engine: a fresh engine per batch, stepped here.
    Each run is bracketed by the reference forward and stored at the tables' speed
    (``at_speed``): on a machine whose speed drifts between profiling the forwards and
    timing the steps, the drift would otherwise land in the host terms."""

    def __init__(self, pair: ModelPair, forwards: CostModel) -> None:
        self.pair, self.forwards = pair, forwards

    def time(self, batch_size: int, shape: TreeShape | None, texts: list[str], new_tokens: int,
             design: StepDesign) -> list[TimedStep]:
        pair = self.pair
        prompts = [pair.format_prompt(t) for t in texts]
        longest = max(len(pair.tokenizer.encode(t)) for t in prompts)
        settings = PolicySettings.single(self.forwards, shape=shape or TreeShape(1, 1, 2))
        engine = pair.engine(make_policy("vanilla" if shape is None else "eagle2", settings), batch_size,
                             longest + new_tokens + 1)
        context, table_ms = reference_point(self.forwards.target, batch_size, longest)
        before = reference_ms(pair, batch_size, context)
        timed = run_steps(engine, prompts, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True),
                          design.warmup, design.steps)
        return at_speed(timed, speed_factor(before, reference_ms(pair, batch_size, context), table_ms))


def spread(steps: list[TimedStep]) -> float:
    """The slowest step of a run over its fastest (1.0 for fewer than two steps)."""
    times = [s.step_ms for s in steps]
    return max(times) / min(times) if len(times) > 1 else 1.0


def steady_run(run: Callable[[], list[TimedStep]], label: str) -> tuple[list[TimedStep], int]:
    """The steps of ``run`` and how many times it was timed again: a run whose
    `spread` exceeds ``UNSTEADY_RATIO`` had a stall inside it and is re-timed (at most
    ``RETIMES`` times), keeping the steadiest attempt.  Why whole runs and not single
    steps: when most of a run stalls, nothing inside it tells the stall from the work,
    but a second attempt minutes later usually runs clean."""
    timed, again = run(), 0
    while spread(timed) > UNSTEADY_RATIO and again < RETIMES:
        again += 1
        tqdm.write(f"step overhead: {label}: its slowest step took {spread(timed):.1f}x its fastest "
                   f"(a stall, not host work); timing it again ({again}/{RETIMES})")
        timed = min(timed, run(), key=spread)
    return timed, again


def design_new_tokens(design: StepDesign, shape: TreeShape | None) -> int:
    """Tokens each request of a run decodes: enough that none finishes before the
    run's warm-up and timed steps are over, at up to ``depth + 1`` tokens a step."""
    depth = 0 if shape is None else shape.max_depth
    return (1 + design.warmup + design.steps) * (depth + 1) + 1


@dataclass(frozen=True)
class StepProfileReport:
    runs: int  # (batch size, shape) runs timed now
    skipped: int  # already stored for this setup
    steps: int  # steps timed now
    retimed: int = 0  # runs timed again after a stall (`steady_run`)
    unsteady: int = 0  # runs stored although every attempt stalled (the steadiest kept)

    def stalls(self) -> str:
        """One line on stalls, empty when there were none."""
        if not self.retimed:
            return ""
        return (f"runs with a stall, timed again: {self.retimed}; still unsteady after {RETIMES} "
                f"more attempts (the steadiest stored): {self.unsteady}")


def run_step_profile(timer: StepTimer, store: Store, setup: Setup, grid: ProfileGrid, design: StepDesign,
                     prompts: PromptSet, *, progress: bool = True,
                     should_stop: Callable[[], bool] = lambda: False) -> StepProfileReport:
    """Time ``design`` at every batch size of ``grid`` with ``timer``, one shape
    after the other (an SGLang timer keeps one engine per shape); each run's steps
    are committed as it finishes, so a rerun with the same setup times only the
    missing runs."""
    done = store.step_cells(setup, PROFILE)
    todo = [(b, shape) for shape in design.runs() for b in grid.batch_sizes if (b, shape_key(shape)) not in done]
    bar = tqdm(total=len(todo), desc="step overhead", unit="run", disable=not progress or not todo)
    steps = retimed = unsteady = 0
    for count, (batch_size, shape) in enumerate(todo):
        if should_stop():
            bar.close()
            return StepProfileReport(count, len(done), steps, retimed, unsteady)
        label = f"B={batch_size} {shape_key(shape)}"
        bar.set_postfix_str(label)
        texts = list(itertools.islice(itertools.cycle(prompts.texts), batch_size))
        timed, again = steady_run(
            lambda: timer.time(batch_size, shape, texts, design_new_tokens(design, shape), design), label)
        retimed += again > 0
        unsteady += spread(timed) > UNSTEADY_RATIO
        store.add_steps(setup, PROFILE, shape_key(shape), timed, os.getloadavg()[0])
        steps += len(timed)
        bar.update(1)
    bar.close()
    return StepProfileReport(len(todo), len(done), steps, retimed, unsteady)
