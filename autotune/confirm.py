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

from sglang_cast.cast import PolicySettings, ReplayResult, SamplingParams, make_policy

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
    prompts: int  # decoded per round, every slice together
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
    # Live CAST over live plain decoding on each disjoint slice of the prompts, from the
    # medians of the slice's rounds (``prompt_slices``).
    slice_speedups: tuple[float, ...] = ()

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
    def worst_slice_speedup(self) -> float:
        """The live speedup on the slice of prompts where CAST did worst."""
        return min(self.slice_speedups, default=self.live_speedup)

    def wins(self, min_speedup: float) -> bool:
        """The gate's rule: CAST at least ``min_speedup`` times plain decoding over all
        the prompts, and no slower than it on any slice.  A win over all of them can be a
        few prompts', and the worst of several noisy slices is biased low: on the AMX Xeon
        (2026-11-30) the B <= 2 chain ran 1.04x, 1.13x and 1.10x plain on three slices of
        the tuning prompts and 1.04x / 1.18x on mt_bench / humaneval, while the B <= 32
        chain ran 0.99x on the first 32 tuning prompts and 0.95x on mt_bench."""
        return self.live_speedup >= min_speedup and self.worst_slice_speedup >= 1.0

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
        out["slice_speedups"] = [round(v, 4) for v in self.slice_speedups]
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


def prompt_slices(texts: list[str], batch_size: int, wanted: int) -> list[list[str]]:
    """``texts`` cut into ``wanted`` disjoint slices of whole batches, fewer when the
    texts do not hold that many (one slice at least: all of them when they do not fill
    a batch).  Whole batches, because a partial batch at the end runs at a smaller
    batch size than the bucket's: on the AMX Xeon a gate of 48 prompts at B = 32 (a batch
    of 32, then one of 16) measured CAST 1.06x plain, while in the next minutes the first
    32 prompts alone ran 0.99x and the other 16 1.11x (2026-11-30)."""
    size = max(batch_size, len(texts) // wanted // batch_size * batch_size)
    count = max(1, min(wanted, len(texts) // size))
    return [texts[i * size:(i + 1) * size] for i in range(count)]


def gate_batch_size(bucket_traces: list[StoredTrace]) -> int:
    """The batch size a bucket is gated at: the largest its stored traces ran."""
    return max(s.batch_size for s in bucket_traces)


def gate_prompts(prompts: PromptSet, batch_size: int, per_slice: int, slices: int) -> PromptSet:
    """The head of ``prompts`` the live gate decodes at ``batch_size``: ``slices`` slices
    of ``per_slice`` prompts each, a whole batch at least (cut by ``prompt_slices``)."""
    return prompts.head(max(per_slice, batch_size) * slices)


# runs[method][round][slice]: the timed steps of one decode of one slice; method 0 is
# CAST, method 1 plain decoding
Runs = tuple[list[list[list[TimedStep]]], list[list[list[TimedStep]]]]


@dataclass(frozen=True)
class Prediction:
    """Replay's rates for a bucket's live run: CAST's and plain decoding's over the
    stored iterations whose whole batch is among the run's prompts (all of the
    bucket's when none are), and the context most of them ran at."""

    traces: int
    cast: ReplayResult
    plain: ReplayResult
    context: int  # median of the iterations' longest contexts

    @classmethod
    def of(cls, settings: PolicySettings, prompt_ids: list[str], traces: list[StoredTrace]) -> Prediction:
        wanted = set(prompt_ids)
        own = [s.trace for s in traces if set(s.prompt_ids) <= wanted]
        chosen = own or [s.trace for s in traces]
        return cls(len(chosen), replay_settings(chosen, settings), replay_settings(chosen, settings, "vanilla"),
                   int(statistics.median(int(t.context_lens.max()) for t in chosen)))


def confirm_live(pair: ModelPair, settings: PolicySettings, prompts: PromptSet, batch_size: int,
                 max_new_tokens: int, context_length: int, traces: list[StoredTrace],
                 rounds: int = 3, progress: bool = False, slices: int = 1) -> Confirmation:
    """``traces``: the stored traces of the bucket being confirmed; those whose
    batch consists of ``prompts`` only give the prediction (all of them if none do).
    ``slices``: the prompts are decoded as that many disjoint slices (``prompt_slices``),
    CAST and plain decoding back to back on each slice in every round, and each slice's
    speedup is kept beside the pooled rates."""
    predicted = Prediction.of(settings, prompts.ids, traces)
    # The bucket boundary most iterations are charged at: where the reference forward is timed.
    context, table_ms = reference_point(settings.costs.target, batch_size, predicted.context)
    before = reference_ms(pair, batch_size, context)

    texts = [pair.format_prompt(t) for t in prompts.texts]
    parts = prompt_slices(texts, batch_size, slices)
    capacity = min(context_length, max(len(pair.tokenizer.encode(t)) for t in texts) + max_new_tokens + 1)
    engines = [pair.engine(make_policy(name, settings), batch_size, capacity) for name in ("cast", "vanilla")]
    params = SamplingParams(max_new_tokens=max_new_tokens)
    for engine in engines:  # first use of the shapes, excluded
        run_steps(engine, texts[:batch_size], params, limit=WARMUP_STEPS)
    runs: Runs = ([], [])
    bar = tqdm(total=2 * rounds * len(parts), desc=f"live gate B={batch_size}", unit="run", disable=not progress)
    for _ in range(rounds):
        for per_round in runs:
            per_round.append([])
        for part in parts:
            for engine, per_round in zip(engines, runs):
                bar.set_postfix_str(engine.policy.name)
                per_round[-1].append(run_steps(engine, part, params))
                bar.update(1)
    bar.close()
    after = reference_ms(pair, batch_size, context)
    return judged(batch_size, sum(len(part) for part in parts), settings, predicted, runs,
                  speed_factor(before, after, table_ms), max_new_tokens)


def judged(batch_size: int, prompts: int, settings: PolicySettings, predicted: Prediction, runs: Runs,
           speed: float, max_new_tokens: int) -> Confirmation:
    """The confirmation of a bucket's live ``runs`` (every round decoded the same
    slices, ``prompts`` in all), any engine's: the native one's (``confirm_live``) or
    SGLang's (``sglang_gate``).  ``speed``: the machine's drift since profiling (the
    reference forward timed around the runs, or SGLang's plain verify forwards inside them)."""
    cast_steps = [s for one_round in runs[0] for s in pooled(one_round)]
    plain_steps = [s for one_round in runs[1] for s in pooled(one_round)]
    for name, steps in (("CAST", cast_steps), ("plain decoding", plain_steps)):
        if not steps:
            raise AutotuneError(f"--confirm-max-new-tokens: the live gate at B={batch_size} timed no {name} step "
                                f"without a prefill (every request finished in the step that admitted it); raise "
                                f"it above {max_new_tokens}")
    return Confirmation(
        batch_size=batch_size, prompts=prompts, rounds=len(runs[0]),
        predicted_traces=predicted.traces, predicted_cast_tokens_per_s=predicted.cast.tokens_per_s,
        predicted_plain_tokens_per_s=predicted.plain.tokens_per_s,
        live_cast_rounds=tuple(round_rate(pooled(one_round)) for one_round in runs[0]),
        live_plain_rounds=tuple(round_rate(pooled(one_round)) for one_round in runs[1]),
        predicted_tau=predicted.cast.tau,
        live_tau=sum(s.tokens for s in cast_steps) / sum(s.batch_size for s in cast_steps),
        speed_factor=speed,
        charged_cast_ms=sum(step_charge_ms(s, settings.costs) for s in cast_steps),
        charged_plain_ms=sum(step_charge_ms(s, settings.costs) for s in plain_steps),
        cast_steps=tuple(cast_steps), plain_steps=tuple(plain_steps),
        slice_speedups=tuple(slice_speedup(runs, index) for index in range(len(runs[0][0]))))


def pooled(one_round: list[list[TimedStep]]) -> list[TimedStep]:
    """One round's steps over every slice."""
    return [s for steps in one_round for s in steps]


def slice_speedup(runs: tuple[list[list[list[TimedStep]]], ...], index: int) -> float:
    """CAST's median round rate on slice ``index`` over plain decoding's."""
    cast, plain = (statistics.median(round_rate(one_round[index]) for one_round in method) for method in runs)
    return cast / plain if plain else 0.0
