"""Live confirmation: the tuned CAST settings against plain decoding, both live.

Replay predicts a rate for CAST and one for plain decoding from the cost model;
neither is trusted until the engine runs.  A confirmation decodes the same
prompts at the bucket's batch size with CAST and with plain decoding (the
vanilla policy), interleaved — CAST, plain, CAST, plain, … ``rounds`` each — so a
burst of load on a shared machine hits both alike.  Each engine first runs a few
untimed steps (first use of its shapes); in the rounds every whole step is timed
with the device-synchronised clock (``overhead.run_steps``), steps that admitted a
request (a prefill) left out.  A round's rate is its committed tokens over its
steps' ms; each method's live rate is the median of its rounds.

Two comparisons come out of it, for two different questions:

* **Is the cost model right?**  Each timed step is charged by the cost model
  (``overhead.step_charge_ms``: its forwards from the tables plus the fitted host work
  for its batch size, context, depth and verified count), and the steps' measured ms
  are set against those charges (``measured_over_charged``).  This is what the gate
  refits on (``Confirmation.beyond``): only host terms can be refitted, and only a
  per-step comparison isolates them.
* **Did replay foresee the run?**  Replay of the stored traces of these prompts
  (iterations whose whole batch is among them; all of the bucket's when none are)
  gives the predicted rates.  They are reported beside the live ones, but they also
  differ by what the traces saw and the live run did not: acceptance, and the batch
  mix (traces collected with more new tokens hold many iterations of a shrinking
  batch; an H200 run's plain prediction was 27 % low for that alone, while its steps
  cost within 1 % of their charges).

On a shared machine the tables and the live run may see different load, so the
reference forward ``f_T(B, c, 1)`` is re-timed around the live run: ``speed_factor``
is that time over the table's (> 1: slower now than when profiled), divided out of
both comparisons.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from tqdm import tqdm

from sglang_cast.cast import PolicySettings, SamplingParams, make_policy

from .errors import AutotuneError
from .models import ModelPair
from .overhead import at_speed, reference_ms, reference_point, run_steps, speed_factor, step_charge_ms
from .prompts import PromptSet
from .store import StoredTrace, TimedStep
from .tuner import replay_settings

WARMUP_STEPS = 4  # untimed steps per engine before the first round


def round_rate(steps: list[TimedStep]) -> float:
    """Committed tokens per second over the round's timed steps."""
    ms = sum(s.step_ms for s in steps)
    return 1000.0 * sum(s.tokens for s in steps) / ms if ms > 0 else 0.0


@dataclass(frozen=True)
class Confirmation:
    batch_size: int
    prompts: int
    rounds: int
    predicted_traces: int  # stored iterations the prediction replayed
    predicted_cast_tokens_per_s: float
    predicted_plain_tokens_per_s: float
    live_cast_rounds: tuple[float, ...]  # tokens/s of each round, in order
    live_plain_rounds: tuple[float, ...]
    predicted_tau: float
    live_tau: float
    speed_factor: float  # f_T(B, c, 1) timed around the live run / the table's value
    charged_cast_ms: float  # what the cost model charges for the CAST run's timed steps, summed
    charged_plain_ms: float  # the same for the plain run's
    cast_steps: tuple[TimedStep, ...] = field(default=(), repr=False)  # every timed step (a refit's samples)
    plain_steps: tuple[TimedStep, ...] = field(default=(), repr=False)

    @property
    def live_cast_tokens_per_s(self) -> float:
        return statistics.median(self.live_cast_rounds)

    @property
    def live_plain_tokens_per_s(self) -> float:
        return statistics.median(self.live_plain_rounds)

    @property
    def live_over_predicted(self) -> float:
        """CAST's live rate over its predicted rate."""
        return self.live_cast_tokens_per_s / self.predicted_cast_tokens_per_s if self.predicted_cast_tokens_per_s \
            else 0.0

    @property
    def live_over_predicted_at_profile_speed(self) -> float:
        """CAST's live over predicted with the machine's slowdown since profiling removed."""
        return self.live_over_predicted * self.speed_factor

    @property
    def plain_live_over_predicted(self) -> float:
        return self.live_plain_tokens_per_s / self.predicted_plain_tokens_per_s \
            if self.predicted_plain_tokens_per_s else 0.0

    @property
    def plain_live_over_predicted_at_profile_speed(self) -> float:
        return self.plain_live_over_predicted * self.speed_factor

    @property
    def live_speedup(self) -> float:
        """Live CAST over live plain decoding: below 1, CAST loses here."""
        return self.live_cast_tokens_per_s / self.live_plain_tokens_per_s if self.live_plain_tokens_per_s else 0.0

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_cast_tokens_per_s / self.predicted_plain_tokens_per_s \
            if self.predicted_plain_tokens_per_s else 0.0

    @property
    def cast_measured_over_charged(self) -> float:
        """The CAST run's timed steps, at the profile's speed, over what the cost model
        charged for those same steps (1.0: the cost model is right)."""
        return measured_over_charged(self.cast_steps, self.charged_cast_ms, self.speed_factor)

    @property
    def plain_measured_over_charged(self) -> float:
        return measured_over_charged(self.plain_steps, self.charged_plain_ms, self.speed_factor)

    def beyond(self, margin: float) -> bool:
        """Did CAST's or plain decoding's steps take more than ``margin`` off what the cost
        model charged for them, with the machine's own drift (``speed_factor``) removed?
        A machine that runs every forward slower than when profiled is not a cost model's
        error a refit could fix: that is `drifted`.  Rates off their replayed prediction
        are not a miss: replay runs other iterations (module docstring)."""
        return max(abs(self.cast_measured_over_charged - 1.0), abs(self.plain_measured_over_charged - 1.0)) > margin

    def drifted(self, margin: float) -> bool:
        """Did the reference forward run more than ``margin`` off its table value?"""
        return abs(self.speed_factor - 1.0) > margin

    def steps_at_profile_speed(self) -> tuple[list[TimedStep], list[TimedStep]]:
        """The CAST and plain runs' timed steps with the machine's drift divided out, so
        a refit fitted on them charges host work, not a slower machine."""
        return at_speed(list(self.cast_steps), self.speed_factor), at_speed(list(self.plain_steps), self.speed_factor)

    def summary(self) -> dict:
        out = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()
               if k not in ("cast_steps", "plain_steps")}
        out["live_cast_rounds"] = [round(v, 4) for v in self.live_cast_rounds]
        out["live_plain_rounds"] = [round(v, 4) for v in self.live_plain_rounds]
        out["timed_steps"] = {"cast": len(self.cast_steps), "plain": len(self.plain_steps)}
        for name in ("live_cast_tokens_per_s", "live_plain_tokens_per_s", "live_speedup", "predicted_speedup"):
            out[name] = round(getattr(self, name), 4)
        out["cast_live_over_predicted"] = round(self.live_over_predicted, 4)
        out["plain_live_over_predicted"] = round(self.plain_live_over_predicted, 4)
        out["cast_live_over_predicted_at_profile_speed"] = round(self.live_over_predicted_at_profile_speed, 4)
        out["plain_live_over_predicted_at_profile_speed"] = round(self.plain_live_over_predicted_at_profile_speed, 4)
        out["cast_measured_over_charged"] = round(self.cast_measured_over_charged, 4)
        out["plain_measured_over_charged"] = round(self.plain_measured_over_charged, 4)
        return out


def measured_over_charged(steps: tuple[TimedStep, ...], charged: float, speed: float) -> float:
    """Steps' measured ms at the profile's speed (``speed``: the drift) over ``charged``."""
    return sum(s.step_ms for s in steps) / speed / charged if charged > 0 else 0.0


def confirm_live(pair: ModelPair, settings: PolicySettings, prompts: PromptSet, batch_size: int,
                 max_new_tokens: int, context_length: int, traces: list[StoredTrace],
                 rounds: int = 3, progress: bool = False) -> Confirmation:
    """``traces``: the stored traces of the bucket being confirmed; those whose
    batch consists of ``prompts`` only give the prediction (all of them if none do)."""
    wanted = set(prompts.ids)
    own = [s.trace for s in traces if set(s.prompt_ids) <= wanted]
    chosen = own or [s.trace for s in traces]
    predicted = replay_settings(chosen, settings)
    predicted_plain = replay_settings(chosen, settings, "vanilla")
    # The bucket boundary most iterations are charged at: where the reference forward is timed.
    context, table_ms = reference_point(settings.costs.target, batch_size,
                                        int(statistics.median(int(t.context_lens.max()) for t in chosen)))
    before = reference_ms(pair, batch_size, context)

    texts = [pair.format_prompt(t) for t in prompts.texts]
    capacity = min(context_length, max(len(pair.tokenizer.encode(t)) for t in texts) + max_new_tokens + 1)
    engines = [pair.engine(make_policy(name, settings), batch_size, capacity) for name in ("cast", "vanilla")]
    params = SamplingParams(max_new_tokens=max_new_tokens)
    for engine in engines:  # first use of the shapes, excluded
        run_steps(engine, texts[:batch_size], params, limit=WARMUP_STEPS)
    runs: tuple[list[list[TimedStep]], list[list[TimedStep]]] = ([], [])
    bar = tqdm(total=2 * rounds, desc=f"live gate B={batch_size}", unit="run", disable=not progress)
    for _ in range(rounds):
        for engine, per_round in zip(engines, runs):
            bar.set_postfix_str(engine.policy.name)
            per_round.append(run_steps(engine, texts, params))
            bar.update(1)
    bar.close()
    after = reference_ms(pair, batch_size, context)

    cast_steps = [s for steps in runs[0] for s in steps]
    plain_steps = [s for steps in runs[1] for s in steps]
    for name, method_runs in (("CAST", runs[0]), ("plain decoding", runs[1])):
        if not any(method_runs):
            raise AutotuneError(f"--confirm-max-new-tokens: the live gate at B={batch_size} timed no {name} step "
                                f"without a prefill (every request finished in the step that admitted it); raise "
                                f"it above {max_new_tokens}")
    return Confirmation(
        batch_size=batch_size, prompts=len(texts), rounds=rounds, predicted_traces=len(chosen),
        predicted_cast_tokens_per_s=predicted.tokens_per_s, predicted_plain_tokens_per_s=predicted_plain.tokens_per_s,
        live_cast_rounds=tuple(round_rate(steps) for steps in runs[0]),
        live_plain_rounds=tuple(round_rate(steps) for steps in runs[1]),
        predicted_tau=predicted.tau, live_tau=sum(s.tokens for s in cast_steps) / sum(s.batch_size for s in cast_steps),
        speed_factor=speed_factor(before, after, table_ms),
        charged_cast_ms=sum(step_charge_ms(s, settings.costs) for s in cast_steps),
        charged_plain_ms=sum(step_charge_ms(s, settings.costs) for s in plain_steps),
        cast_steps=tuple(cast_steps), plain_steps=tuple(plain_steps))
