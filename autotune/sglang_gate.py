"""The live gate of ``cast-autotune tune --backend sglang``: the candidate profile
against plain decoding, both served by SGLang's engine with the CAST worker
(``sglang_plugin.live_runs``), judged as the native gate judges (``confirm.judged``).

The gate's rules are the native ones (gate.py); what differs is where the steps come
from.  Every bucket is run at once, one engine per (round, method) — an SGLang engine
takes ~25 s to start on a 2-core CPU, so one per bucket would cost minutes —
CAST and plain decoding alternating, ``live_rounds`` each.  Each bucket decodes the
prompts the native gate would (``gate_prompts``, the chat template applied, cut into
``confirm_sets`` slices of whole batches) at its largest traced batch size.  Rates are
committed tokens over the worker's logged decode-iteration ms (``step_log``), and
those same iterations are what the cost model's charges are set against, so a miss
refits the SGLang setup's host overhead from SGLang's own steps.  The machine's drift
since profiling (``speed_factor``) is read inside the runs, since no SGLang forward
runs outside the engines: the worker times each iteration's verify forward on its own
(``step_log``), and a bucket's factor is the median over its plain runs' steps of
that forward, ``f_T(B, c, 1)``, over its table value: the native gate's reference
forward, timed during the run instead of around it.  Without it the refit read a
machine 15-25 % faster than its tables as no host work at all (2026-12-01).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tqdm import tqdm

from sglang_cast.cast import PolicySettings
from sglang_cast.profile import Profile
from sglang_cast.sglang_plugin.step_log import LoggedStep, median_speed

from .confirm import Confirmation, Prediction, Runs, gate_batch_size, gate_prompts, judged, prompt_slices
from .gate import LiveCheck
from .prompts import PromptSet
from .store import StoredTrace, TimedStep

LoggedRuns = tuple[list[list[list[LoggedStep]]], list[list[list[LoggedStep]]]]  # (CAST, plain) [round][slice][step]


def plain_speed(batch_size: int, rounds: list[list[list[LoggedStep]]]) -> float:
    """The median over the plain runs' steps (``rounds`` of slices) of the verify
    forward's time over its table charge: how much slower than profiled the machine
    ran ``f_T(B, c, 1)`` during the gate."""
    speed = median_speed(step for one_round in rounds for steps in one_round for step in steps)
    if speed is None:
        raise ValueError(f"the SGLang live gate at B={batch_size}: the worker logged no timed verify forward, so "
                         "the machine's speed cannot be read (a worker older than its step log's verify_ms?)")
    return speed


class LiveRunner(Protocol):
    """``sglang_plugin.live_runs.SGLangLiveRuns``: one engine per call."""

    def run(self, profile: Profile, plain: bool, slices: dict[int, list[list[str]]],
            max_new_tokens: int) -> dict: ...


@dataclass(frozen=True)
class GateLoad:
    """What the gate decodes: per slice, how many, for how long, how often."""

    per_slice: int  # prompts per slice (a whole batch at least)
    slices: int
    max_new_tokens: int
    rounds: int


@dataclass(frozen=True)
class SGLangGate:
    """The pieces ``tune --backend sglang`` builds before tuning: the engines' runner
    and the prompt formatting of the served model (its chat template)."""

    runner: LiveRunner
    format_prompt: Callable[[str], str]

    def check(self, by_bucket: dict[int, list[StoredTrace]], candidate: Callable[[PolicySettings], Profile],
              prompts: PromptSet, load: GateLoad, progress: bool = False) -> LiveCheck:
        """The live check over the buckets of ``by_bucket`` (their stored traces):
        ``candidate(settings)`` is the profile those settings would be published as
        (its runtime states sized), which the CAST runs serve."""
        def confirm(settings: PolicySettings, sizes: list[int]) -> dict[int, Confirmation]:
            batches = {size: gate_batch_size(by_bucket[size]) for size in sizes}
            chosen = {size: gate_prompts(prompts, batch, load.per_slice, load.slices)
                      for size, batch in batches.items()}
            slices = {batches[size]: prompt_slices([self.format_prompt(t) for t in chosen[size].texts],
                                                   batches[size], load.slices) for size in sizes}
            logged = self.decode(candidate(settings), slices, load, progress)
            return {size: judged(batch, sum(map(len, slices[batch])), settings,
                                 Prediction.of(settings, chosen[size].ids, by_bucket[size]), stored(logged[batch]),
                                 plain_speed(batch, logged[batch][1]), load.max_new_tokens)
                    for size, batch in batches.items()}
        return confirm

    def decode(self, profile: Profile, slices: dict[int, list[list[str]]], load: GateLoad,
               progress: bool) -> dict[int, LoggedRuns]:
        """``load.rounds`` rounds of a CAST engine then a plain one over every batch
        size's slices; per batch size the steps each run logged, by method."""
        runs: dict[int, LoggedRuns] = {batch: ([], []) for batch in slices}
        bar = tqdm(total=2 * load.rounds, desc="live gate (SGLang)", unit="engine", disable=not progress)
        for _ in range(load.rounds):
            for method, plain in enumerate((False, True)):
                bar.set_postfix_str("plain" if plain else "cast")
                logged = self.runner.run(profile, plain, slices, load.max_new_tokens)
                for batch, per_slice in logged.items():
                    runs[batch][method].append(per_slice)
                bar.update(1)
        bar.close()
        return runs


def stored(runs: LoggedRuns) -> Runs:
    """The logged runs as the gate judges and stores them (``confirm.Runs``)."""
    cast, plain = ([[[TimedStep.of(step) for step in steps] for steps in one_round] for one_round in method]
                   for method in runs)
    return cast, plain
