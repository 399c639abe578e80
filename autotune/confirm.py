"""Live confirmation: does the engine run as fast as replay predicted?

The tuned settings decode a few prompts live on the engine.  Three rates are
compared, all counting tokens the same way (accepted + one bonus per sequence
per iteration, as ``ReplayResult`` does):

* ``predicted`` — ``replay`` of the tuned policy on the stored traces of these
  same prompts (iterations whose whole batch is among them): what tuning believed;
* ``live`` — committed tokens over the measured iteration time
  (the engine's iteration records: draft + verify ms, prefill excluded);
* ``charged`` — the live run's own decisions charged with the cost tables
  (``cast.trace.charge``, what replay charges): separates cost-table error
  (``live`` vs ``charged``) from trace-sampling error (``charged`` vs ``predicted``).

On a shared machine the cost tables and the live run may see different load, and
then no model can agree with the clock.  So the check also re-times the reference
forward ``f_T(B, c, 1)`` just before and just after the live run: ``speed_factor``
is that time over the table's (> 1: the machine is slower now than when it was
profiled), and ``live_over_predicted_at_profile_speed`` removes it.  A wall-clock
rate including prefill is reported alongside.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass

from sglang_cast.cast import PolicySettings, SamplingParams, charge
from sglang_cast.cast.policies import CastPolicy
from sglang_cast.engine import StepLog

from .models import ModelPair
from .profiler import forward_timer
from .prompts import PromptSet
from .store import StoredTrace
from .tuner import replay_settings

CALIBRATION_REPEATS = 5


class PlanLoggingCast(CastPolicy):
    """The CAST policy, keeping every iteration plan the live engine used."""

    def __init__(self, settings: PolicySettings) -> None:
        super().__init__(settings)
        self.plans = []

    def begin(self, batch_size: int, context_len: int):
        plan = super().begin(batch_size, context_len)
        self.plans.append(plan)
        return plan


@dataclass(frozen=True)
class Confirmation:
    batch_size: int
    prompts: int
    iterations: int
    predicted_traces: int  # stored iterations the prediction replayed
    predicted_tokens_per_s: float
    live_tokens_per_s: float
    charged_tokens_per_s: float
    live_wall_tokens_per_s: float
    predicted_tau: float
    live_tau: float
    speed_factor: float  # f_T(B, c, 1) timed around the live run / the table's value

    @property
    def live_over_predicted(self) -> float:
        return self.live_tokens_per_s / self.predicted_tokens_per_s if self.predicted_tokens_per_s else 0.0

    @property
    def live_over_predicted_at_profile_speed(self) -> float:
        return self.live_over_predicted * self.speed_factor

    def summary(self) -> dict:
        out = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["live_over_predicted"] = round(self.live_over_predicted, 4)
        out["live_over_predicted_at_profile_speed"] = round(self.live_over_predicted_at_profile_speed, 4)
        return out


def _reference_ms(pair: ModelPair, batch_size: int, context: int) -> float:
    timer = forward_timer(pair, "target", batch_size, context + 1)
    return timer.time(batch_size, context, 1, warmup=1, repeats=CALIBRATION_REPEATS).median_ms


def confirm_live(pair: ModelPair, settings: PolicySettings, prompts: PromptSet, batch_size: int,
                 max_new_tokens: int, context_length: int, traces: list[StoredTrace]) -> Confirmation:
    """``traces``: the stored traces of the bucket being confirmed; those whose
    batch consists of ``prompts`` only give the prediction (all of them if none do)."""
    wanted = set(prompts.ids)
    own = [s.trace for s in traces if set(s.prompt_ids) <= wanted]
    chosen = own or [s.trace for s in traces]
    predicted = replay_settings(chosen, settings)
    # The bucket boundary most iterations are charged at: where the reference forward is timed.
    table = settings.costs.target
    context = table.select(int(statistics.median(int(t.context_lens.max()) for t in chosen)))
    before = _reference_ms(pair, batch_size, context)

    policy = PlanLoggingCast(settings)
    engine = pair.engine(policy, batch_size, context_length)
    texts = [pair.format_prompt(t) for t in prompts.texts]
    engine.generate(texts[:1], SamplingParams(max_new_tokens=2))  # warm-up, excluded
    policy.plans.clear()
    log = StepLog()
    started = time.perf_counter()
    results = engine.generate(texts, SamplingParams(max_new_tokens=max_new_tokens), on_step=log)
    wall_s = time.perf_counter() - started
    after = _reference_ms(pair, batch_size, context)

    history = log.records
    tokens = sum(sum(h.accepted) + h.batch_size for h in history)
    live_ms = sum(h.draft_ms + h.verify_ms for h in history)
    charged_ms = sum(sum(charge(plan, plan.verified, h.depth, max(h.accepted)))
                     for plan, h in zip(policy.plans, history))
    return Confirmation(
        batch_size=batch_size, prompts=len(texts), iterations=len(history), predicted_traces=len(chosen),
        predicted_tokens_per_s=predicted.tokens_per_s,
        live_tokens_per_s=1000.0 * tokens / live_ms,
        charged_tokens_per_s=1000.0 * tokens / charged_ms,
        live_wall_tokens_per_s=sum(r.completion_tokens for r in results) / wall_s,
        predicted_tau=predicted.tau, live_tau=tokens / sum(h.batch_size for h in history),
        speed_factor=math.sqrt(before * after) / table(batch_size, context, 1))
