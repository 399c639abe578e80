"""The data of the paper's Fig. 3 and Fig. 4: one sweep of EAGLE-2's default tree
(depth 6, top-k 10) at every verify budget m, on the same prompts, with vanilla per
batch size as the baseline and, when greedy, the lossless reference.  Vanilla and
every m of a batch size are timed in the same interleaved rounds (``rounds.py``).

* Fig. 3 ("acceptance"): acceptance length τ (committed tokens of one sequence in
  one iteration) against the cumulative value of the nodes it verified (the summed
  path values: what the draft predicts will be accepted).  If the draft's
  probabilities were calibrated, τ would average 1 + value (the bonus token).
* Fig. 4 ("verify-budget"): tokens/s against m per batch size; the best m is marked.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tqdm import tqdm

from autotune.models import ModelPair
from sglang_cast.cast import EAGLE2_SHAPE, PolicySettings, make_policy
from sglang_cast.engine import IterationRecord
from sglang_cast.hardware import device_name

from .lossless import Judge, check_failed, greedy_check, largest_gap, report_failure
from .rounds import DEFAULT_ROUNDS, EngineRunner, interleave, sampling, summarise

FIGURES = ("acceptance", "verify-budget")
ACCEPTANCE_BIN_WIDTH = 0.5  # cumulative-value bins of the binned mean in Fig. 3


@dataclass
class BudgetRun:
    """One run of EAGLE-2's default depth and top-k at one verify budget ``m``."""

    num_verify_tokens: int
    batch_size: int
    tokens_per_s: float  # median over rounds
    tokens_per_s_rounds: list[float]
    tau: float
    mean_verified_tokens: float
    iterations: int
    lossless: bool | None  # greedy only: tokens identical to vanilla's
    near_ties_only: bool | None  # every divergence a near-tie (table.Record's field)
    largest_gap: float | None
    # One per sequence per iteration: [cumulative value of the verified set, committed tokens]
    points: list[tuple[float, int]]
    device: str | None = None


def acceptance_points(history: list[IterationRecord]) -> list[tuple[float, int]]:
    """(verified set's cumulative value, committed tokens) per sequence per iteration."""
    return [(value, accepted + 1) for r in history for value, accepted in zip(r.verified_value, r.accepted)]


def acceptance_bins(points: list[tuple[float, int]], width: float = ACCEPTANCE_BIN_WIDTH,
                    ) -> list[tuple[float, float, int]]:
    """Mean τ per cumulative-value bin ``[i·width, (i+1)·width)``: (mean value, mean τ,
    points), by increasing value; empty bins are left out."""
    bins: dict[int, list[tuple[float, int]]] = {}
    for value, tau in points:
        bins.setdefault(int(value // width), []).append((value, tau))
    return [(statistics.fmean(v for v, _ in group), statistics.fmean(t for _, t in group), len(group))
            for _, group in sorted(bins.items())]


def budget_sweep(pair: ModelPair, settings: PolicySettings, prompts: list[str], batch_sizes: Sequence[int],
                 budgets: Sequence[int], temperature: float, max_new_tokens: int, context_length: int,
                 judge: Judge | None = None, rounds: int = DEFAULT_ROUNDS,
                 ) -> tuple[list[BudgetRun], dict[int, float]]:
    """Every (batch size, m) run of the figures, and vanilla's median tokens/s per batch size."""
    runs: list[BudgetRun] = []
    vanilla: dict[int, float] = {}
    params = sampling(len(prompts), temperature, max_new_tokens)
    where = device_name(pair.device)
    for batch_size in tqdm(batch_sizes, desc="figure sweep", unit="batch size"):
        runners = {"vanilla": EngineRunner(pair.engine(make_policy("vanilla", settings), batch_size, context_length),
                                           prompts, params)}
        for m in budgets:
            shaped = settings.with_shape(replace(EAGLE2_SHAPE, num_verify_tokens=m), speculate=True)
            runners[m] = EngineRunner(pair.engine(make_policy("eagle2", shaped), batch_size, context_length),
                                      prompts, params)
        measured = interleave(runners, rounds)
        vanilla[batch_size] = measured["vanilla"].tokens_per_s
        reference = measured["vanilla"].typical.outputs
        for m in budgets:
            typical = measured[m].typical
            stats = summarise(typical)
            mismatches, near_ties_only = (greedy_check(pair, judge, prompts, typical.outputs, reference)
                                          if temperature == 0 else (None, None))
            run = BudgetRun(num_verify_tokens=m, batch_size=batch_size, tokens_per_s=measured[m].tokens_per_s,
                            tokens_per_s_rounds=measured[m].rates, tau=stats["tau"],
                            mean_verified_tokens=stats["mean_verified_tokens"], iterations=stats["iterations"],
                            lossless=None if mismatches is None else not mismatches, near_ties_only=near_ties_only,
                            largest_gap=largest_gap(mismatches), points=acceptance_points(typical.history),
                            device=where)
            if check_failed(run):
                report_failure(f"eagle2 m={m} at batch {batch_size}", mismatches)
            runs.append(run)
    return runs, vanilla
