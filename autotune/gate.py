"""The live gate: no bucket is published speculating unless CAST beat plain decoding live.

Replay's comparison is the first filter (``tuner.replay_filter``): a bucket whose
best tree replays slower than plain decoding is off, and live cannot turn it on.
Every bucket is confirmed live (``confirm.confirm_live``: the settings to publish and
plain decoding interleaved on the same prompts and batch size, medians of rounds):
a speculating bucket's run checks its tree; an off bucket's CAST engine decodes
plainly, so its run checks the plain prediction the profile publishes for it.  Then:

* If the reference forward itself ran more than ``margin`` off its table value (the
  machine drifted since profiling: another tenant, clocks), the tuner says so in one
  line: only re-timing the forwards fixes that.  Rates are compared with the drift
  divided out (``Confirmation.beyond``).
* If CAST's or plain decoding's timed steps took more than ``margin`` off what the
  cost model charges for those same steps in any bucket (``Confirmation.beyond``; not
  the replayed rates, which also differ by acceptance and batch mix), the cost model is
  wrong for this machine.  The tuner says so in one line,
  refits the host overhead with the live runs' own whole steps added to the stored
  ones (``refit``), re-tunes the buckets that missed with the refitted costs
  (``retune``) and confirms every bucket once more — once: a second miss
  is reported, not chased.
* A speculating bucket whose live CAST rate is below ``min_speedup`` times its live
  plain rate, or below plain decoding's on any slice of the prompts, is published with
  ``speculate: false`` (``Confirmation.wins``, ``tuner.switched_off(..., "live")``).
  ``min_speedup`` defaults to 1 + the server's hysteresis margin
  (``SPECULATION_WIN_MARGIN``): on the AMX Xeon a one-token chain passed a gate of
  1.01x and then ran 0.79x plain decoding on benchmark prompts (2026-11-29), a
  difference within what three rounds on a shared VM resolve.

The published cost model is the refitted one when a refit happened, so the
policies decide online with the costs the live run measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_cast.cast import CostModel, PolicySettings

from .confirm import Confirmation
from .costs import MeasuredCosts
from .tuner import BucketResult, switched_off

# (settings of every bucket, the buckets' max_batch_sizes) -> each one's live confirmation, by
# max_batch_size: all at once, so an engine that starts slowly (SGLang's) serves every bucket
LiveCheck = Callable[[PolicySettings, list[int]], dict[int, Confirmation]]
# (settings of every bucket, one bucket's max_batch_size) -> its live confirmation
BucketCheck = Callable[[PolicySettings, int], Confirmation]
# every live confirmation of the first pass -> the cost model refitted with their steps added
Refit = Callable[[list[Confirmation]], MeasuredCosts]
# (bucket max_batch_size, refitted costs) -> the bucket tuned again (replay-filtered)
Retune = Callable[[int, CostModel], BucketResult]


@dataclass(frozen=True)
class GateOutcome:
    results: list[BucketResult]  # as published
    costs: MeasuredCosts  # as published (refitted when a refit happened)
    confirmations: dict[int, Confirmation]  # final live check per bucket
    refit: dict[str, Any] | None  # what the refit changed, for the provenance

    def live_summaries(self) -> list[dict]:
        """Per bucket: predicted vs live (CAST and plain) and the published decision."""
        out = []
        for result in self.results:
            check = self.confirmations.get(result.settings.max_batch_size)
            if check is not None:
                out.append({"max_batch_size": result.settings.max_batch_size, **check.summary(),
                            "speculate": result.settings.speculate})
        return out


def per_bucket(check: BucketCheck) -> LiveCheck:
    """A live check that runs one bucket after the other (the native engine's)."""
    return lambda settings, sizes: {size: check(settings, size) for size in sizes}


def confirm_all(results: list[BucketResult], costs: CostModel, check: LiveCheck) -> dict[int, Confirmation]:
    """Run every bucket live with the settings that would be published."""
    settings = PolicySettings(buckets=tuple(r.settings for r in results), costs=costs)
    return check(settings, [r.settings.max_batch_size for r in results])


def drift_line(drifted: dict[int, float], margin: float) -> str:
    detail = ", ".join(f"bucket <= {size}: {factor:.2f}x" for size, factor in drifted.items())
    return (f"the machine ran the reference forward more than ±{margin:.0%} off its profiled time ({detail}): "
            "rates are compared at the profile's speed; re-time the forward tables with `cast-autotune profile "
            "--max-age 0` when this persists")


def mismatch_line(misses: dict[int, Confirmation], margin: float, then: str) -> str:
    detail = "; ".join(
        f"bucket <= {size}: CAST's {len(c.cast_steps)} steps took {c.cast_measured_over_charged:.0%} of their "
        f"charge, plain decoding's {len(c.plain_steps)} {c.plain_measured_over_charged:.0%}"
        for size, c in misses.items())
    return (f"live steps differ from what the cost model charges for them by more than ±{margin:.0%} at the "
            f"profile's speed ({detail}): {then}")


def live_gate(results: list[BucketResult], costs: MeasuredCosts, check: LiveCheck, refit: Refit | None,
              retune: Retune, margin: float, say: Callable[[str], None] = print, *,
              min_speedup: float) -> GateOutcome:
    """Confirm every bucket, refit once if live misses the prediction by more than
    ``margin``, then switch off every speculating bucket where CAST did not beat plain
    decoding live by ``min_speedup`` (module docstring).
    ``refit=None``: the live steps are not this setup's (another backend's costs), so
    a miss is reported and not refitted."""
    confirmations = confirm_all(results, costs.costs, check)
    drifted = {size: c.speed_factor for size, c in confirmations.items() if c.drifted(margin)}
    if drifted:
        say(drift_line(drifted, margin))
    misses = {size: c for size, c in confirmations.items() if c.beyond(margin)}
    refit_info = None
    if misses and refit is None:
        say(mismatch_line(misses, margin, "not refitted (no measurements of this setup to refit: another "
                                          "backend's, or tables calibrated from another machine's profile); "
                                          "published with the live gate's decision"))
    elif misses:
        steps = sum(len(c.cast_steps) + len(c.plain_steps) for c in confirmations.values())
        say(mismatch_line(misses, margin, f"refitting the host overhead with the live runs' {steps} whole steps, "
                                          f"re-tuning bucket(s) {', '.join(map(str, misses))} and confirming once "
                                          "more"))
        before = costs.costs.overhead
        costs = refit(list(confirmations.values()))
        results = [retune(r.settings.max_batch_size, costs.costs) if r.settings.max_batch_size in misses else r
                   for r in results]
        confirmations = confirm_all(results, costs.costs, check)
        still = [size for size, c in confirmations.items() if c.beyond(margin)]
        if still:
            say(f"still beyond ±{margin:.0%} after one recalibration at bucket(s) {', '.join(map(str, still))}: "
                "published with the live gate's decision (see live_confirmation)")
        refit_info = {"buckets": list(misses), "margin": margin, "steps": dict(costs.steps),
                      "overhead_before": None if before is None else before.to_dict(),
                      "missed_before": {str(size): c.summary() for size, c in misses.items()},
                      "still_beyond_margin": still}
    gated = []
    for result in results:
        live = confirmations.get(result.settings.max_batch_size)
        lost = result.settings.speculate and live is not None and not live.wins(min_speedup)
        gated.append(switched_off(result, "live") if lost else result)
    return GateOutcome(gated, costs, confirmations, refit_info)
