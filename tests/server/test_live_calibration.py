"""The live calibration and gate (sglang_cast/server/calibration.py) as pure logic:
what an iteration is charged, when a bucket switches off, how a probe brings it
back, what a hot-reload keeps, and the live host-overhead fit.  No model runs:
iterations are `IterationCost`s with chosen live times."""

from dataclasses import replace

import pytest
import torch
from support.synthetic import PathModel

from sglang_cast.cast import (BucketSettings, CostModel, OverheadTable, PolicySettings, TreeShape, charge,
                              grow_tree, make_policy)
from sglang_cast.server.calibration import IterationCost, LiveCalibration, iteration_cost
from sglang_cast.server.config import LiveGateConfig

SHAPE = TreeShape(top_k=4, max_depth=4, num_verify_tokens=12)
PLAIN_MS = 5.0  # f_T(1) of CostModel.linear(1.0, 4.0)
CONFIG = LiveGateConfig(window=8, min_samples=4, plain_window=8, min_plain_samples=2, probe_after=5,
                        max_probe_after=20)


def settings(speculate: bool = True) -> PolicySettings:
    """Two buckets: B <= 2 and B <= 64."""
    return PolicySettings(buckets=(BucketSettings(2, SHAPE, speculate=speculate), BucketSettings(64, SHAPE)),
                          costs=CostModel.linear(1.0, 4.0, draft_ratio=0.2))


def charged(predicted_ms: float, forwards_ms: float):
    return lambda: (predicted_ms, forwards_ms)


def spec(batch: int, live_ms: float, tokens_per_seq: float = 3.0, verified: int = 4, depth: int = 3,
         predicted_ms: float = 10.0) -> IterationCost:
    return IterationCost(batch, 10, depth, verified, round(tokens_per_seq * batch), live_ms, PLAIN_MS,
                         charged(predicted_ms, predicted_ms))


def plain(batch: int, live_ms: float) -> IterationCost:
    return IterationCost(batch, 10, 0, 0, batch, live_ms, PLAIN_MS, charged(PLAIN_MS, PLAIN_MS))


def plan_for(calibration: LiveCalibration, batch: int):
    return make_policy("cast", calibration.served).begin(batch, 10)


def feed(calibration: LiveCalibration, cost: IterationCost, times: int = 1):
    """Observe ``cost`` ``times`` times; the settings of the last change (or None)."""
    changed = None
    for _ in range(times):
        changed = calibration.observe(plan_for(calibration, cost.batch_size), cost) or changed
    return changed


def speculating(s: PolicySettings) -> list[bool]:
    return [b.speculate for b in s.buckets]


def test_an_iteration_is_charged_its_plan_and_its_residual_is_the_host_work():
    terms = torch.tensor([[[0.7, 3.0, 0.5, 0.25]]], dtype=torch.float64)  # plain, spec_base, per_layer, per_token
    costs = replace(CostModel.linear(1.0, 4.0, draft_ratio=0.2), overhead=OverheadTable(1 << 30, 1, (1,), terms))
    policy = make_policy("cast", PolicySettings.single(costs, shape=SHAPE))
    plan = policy.begin(1, 10)
    tree = grow_tree(plan, PathModel(seed=3), torch.tensor([1]))
    verified = plan.verify_count(tree)
    depth = len(plan.kept)
    assert depth >= 2 and verified >= 1, "the planted case must draft and verify"
    cost = iteration_cost(plan, 1, 10, verified, [2], live_ms=40.0)
    assert cost.predicted_ms == pytest.approx(sum(charge(plan, verified, depth, 2)))
    host = 3.0 + 0.5 * (depth - 1) + 0.25 * verified  # what charge adds beyond the forwards
    assert cost.predicted_ms - cost.forwards_ms == pytest.approx(host)
    assert cost.sample.residual_ms == pytest.approx(40.0 - cost.forwards_ms)
    assert (cost.tokens, cost.depth, cost.plain_ms) == (3, depth, pytest.approx(5.7))

    plain_plan = make_policy("vanilla", policy.settings).begin(1, 10)
    plain_cost = iteration_cost(plain_plan, 1, 10, 0, [0], live_ms=6.0)
    assert plain_cost.depth == 0 and plain_cost.tokens == 1
    assert plain_cost.predicted_ms - plain_cost.forwards_ms == pytest.approx(0.7)


def test_a_bucket_whose_live_speculation_loses_to_plain_is_switched_off_alone():
    calibration = LiveCalibration(CONFIG, settings())
    fast = spec(1, live_ms=6.0)  # 3 tokens per 6 ms = 0.5 tok/ms > 1/5 plain
    assert feed(calibration, fast, times=8) is None
    slow = spec(1, live_ms=20.0)  # 3 tokens per 20 ms = 0.15 tok/ms < 0.2 plain
    changes = [calibration.observe(plan_for(calibration, 1), slow) for _ in range(8)]
    switched = [i for i, c in enumerate(changes) if c is not None]
    assert len(switched) == 1, "one switch, then the bucket is plain"
    # The window of 8 turned over: the mean rate falls below 0.2 once 6 slow iterations are in it
    # ((2·3 + 6·3) / (2·6 + 6·20) = 0.18 < 0.2; five slow ones give 24 / 118 = 0.203).
    assert switched[0] == 5
    assert speculating(changes[5]) == [False, True]
    report = calibration.report()["buckets"][0]
    assert report["speculate_live"] is False and report["switches_off"] == 1
    assert report["plain_rate_source"] == "table"
    # An iteration begun under the old settings (none is, with reconfigure between iterations) changes nothing.
    assert feed(calibration, slow, times=20) is None and calibration.report()["buckets"][0]["switches_off"] == 1


def test_the_gate_charges_no_iteration_itself_a_report_does_once():
    calls = []

    def charges():
        calls.append(1)
        return 10.0, 8.0

    calibration = LiveCalibration(CONFIG, settings())
    for live_ms in [6.0] * 8 + [50.0] * 8:  # speculation, then a switch-off
        calibration.observe(plan_for(calibration, 1), IterationCost(1, 10, 3, 4, 3, live_ms, PLAIN_MS, charges))
    assert calls == [] and calibration.report(samples=False)["buckets"][0]["switches_off"] == 1
    report = calibration.report()["buckets"][0]
    assert len(calls) == len(report["step_samples"]) > 0
    calibration.report()
    assert len(calls) == len(report["step_samples"]), "each iteration is charged once"


def test_the_large_bucket_is_judged_on_its_own_batch_sizes():
    calibration = LiveCalibration(CONFIG, settings())
    # 40 sequences, 3 tokens each per 60 ms = 2 tok/ms; plain would do 40 per 5 ms = 8 tok/ms.
    changed = feed(calibration, spec(40, live_ms=60.0), times=4)
    assert speculating(changed) == [True, False]
    assert feed(calibration, spec(1, live_ms=6.0), times=8) is None


def test_speculation_that_pays_is_never_switched_off_and_the_flag_off_only_measures():
    calibration = LiveCalibration(CONFIG, settings())
    assert feed(calibration, spec(1, live_ms=14.0), times=50) is None  # 0.214 tok/ms >= 0.2
    measuring = LiveCalibration(replace(CONFIG, switching=False), settings())
    assert feed(measuring, spec(1, live_ms=100.0), times=50) is None
    report = measuring.report()["buckets"][0]
    assert report["speculate_live"] is True and report["speculative"]["iterations"] == 8
    assert report["speculative"]["live_over_predicted"] == pytest.approx(10.0)


def test_a_bucket_the_profile_keeps_plain_is_left_alone():
    calibration = LiveCalibration(CONFIG, settings(speculate=False))
    assert feed(calibration, spec(1, live_ms=100.0), times=20) is None
    assert calibration.report()["buckets"][0]["switches_off"] == 0


def test_a_probe_brings_speculation_back_when_it_pays_and_backs_off_when_it_does_not():
    calibration = LiveCalibration(CONFIG, settings())
    assert speculating(feed(calibration, spec(1, live_ms=50.0), times=4)) == [False, True]
    assert feed(calibration, plain(1, 5.0), times=4) is None  # probe_after = 5 plain iterations
    assert speculating(feed(calibration, plain(1, 5.0))) == [True, True]  # the probe starts
    # The probe's first speculative iteration carries the draft's catch-up and is not judged.
    assert feed(calibration, spec(1, live_ms=500.0)) is None
    assert calibration.report()["buckets"][0]["speculative"]["iterations"] == 0
    # Still slow: the probe fails after min_samples speculative iterations, the wait doubles.
    assert speculating(feed(calibration, spec(1, live_ms=50.0), times=4)) == [False, True]
    report = calibration.report()["buckets"][0]
    assert (report["probes"], report["switches_off"], report["plain_iterations_until_probe"]) == (1, 2, 10)
    assert feed(calibration, plain(1, 5.0), times=9) is None
    assert speculating(feed(calibration, plain(1, 5.0))) == [True, True]
    # Recovered: the probe confirms, the wait goes back to probe_after.
    assert feed(calibration, spec(1, live_ms=6.0), times=5) is None
    report = calibration.report()["buckets"][0]
    assert report["switches_on"] == 1 and report["speculate_live"] and not report["probing"]
    assert feed(calibration, spec(1, live_ms=6.0), times=20) is None


# The margins at their exact ties: plain ms 4.0 per iteration (1 token: 0.25 tok/ms)
# and a margin of 0.25, so a speculating bucket's bar is 0.25 · 0.75 = 0.1875 tok/ms
# and a probe's 0.25 · 1.25 = 0.3125, both exact, as are 12 / 64 and 20 / 64 below.
TIE_CONFIG = replace(CONFIG, margin=0.25)
TIE_EPS = 2.0**-16


def judged(live_ms: float, tokens: int) -> IterationCost:
    return IterationCost(1, 10, 3, 4, tokens, live_ms, 4.0, charged(10.0, 10.0))


def speculation_stays_on(live_ms: float) -> bool:
    """A speculating bucket's first judged window: 4 iterations of 3 tokens in ``live_ms`` each."""
    calibration = LiveCalibration(TIE_CONFIG, settings())
    changed = feed(calibration, judged(live_ms, 3), times=TIE_CONFIG.min_samples)
    return changed is None and calibration.report()["buckets"][0]["switches_off"] == 0


@pytest.mark.parametrize("live_ms, stays_on", [
    (16.0, True),  # 12 / 64 = 0.1875: speculation loses by exactly the margin, and stays on
    (16.0 - TIE_EPS, True),  # loses by just less
    (16.0 + TIE_EPS, False),  # loses by just more than the margin: switched off
])
def test_a_speculating_bucket_is_switched_off_only_when_it_loses_by_more_than_the_margin(live_ms, stays_on):
    assert speculation_stays_on(live_ms) is stays_on


def probe_switches_on(live_ms: float) -> bool:
    """A switched-off bucket's probe: its judged window is 4 iterations of 5 tokens in
    ``live_ms`` each (after the catch-up iteration, which is not judged)."""
    calibration = LiveCalibration(TIE_CONFIG, settings())
    assert speculating(feed(calibration, judged(100.0, 3), times=TIE_CONFIG.min_samples)) == [False, True]
    plain_cost = IterationCost(1, 10, 0, 0, 1, 4.0, 4.0, charged(4.0, 4.0))  # live = table: scale 1.0
    assert speculating(feed(calibration, plain_cost, times=TIE_CONFIG.probe_after)) == [True, True]
    assert feed(calibration, judged(500.0, 5)) is None  # the catch-up
    changed = feed(calibration, judged(live_ms, 5), times=TIE_CONFIG.min_samples)
    report = calibration.report()["buckets"][0]
    assert report["probes"] == 1 and not report["probing"]  # judged, one way or the other
    on = report["switches_on"] == 1
    assert report["switches_off"] == (1 if on else 2) and (changed is None) is on
    return on


@pytest.mark.parametrize("live_ms, switches_on", [
    (16.0, True),  # 20 / 64 = 0.3125: the probe wins by exactly the margin, and speculation comes back
    (16.0 - TIE_EPS, True),  # wins by just more
    (16.0 + TIE_EPS, False),  # by just less: the bucket stays plain
])
def test_a_probe_switches_speculation_on_when_it_wins_by_at_least_the_margin(live_ms, switches_on):
    assert probe_switches_on(live_ms) is switches_on


def test_a_uniformly_slower_machine_keeps_speculating_after_its_probe():
    """Plain and speculative iterations both 3x slower than the table: the table's plain
    rate switches the bucket off, but live plain iterations scale the comparison and the
    probe brings speculation back."""
    calibration = LiveCalibration(CONFIG, settings())
    assert speculating(feed(calibration, spec(1, live_ms=18.0), times=4)) == [False, True]  # 0.167 < 0.2
    feed(calibration, plain(1, 15.0), times=5)  # live plain is 3x the table: 1/15 tok/ms
    assert calibration.report()["buckets"][0]["plain_rate_source"] == "live-scaled"
    assert feed(calibration, spec(1, live_ms=18.0), times=5) is None  # 0.167 >= 1/15 (first: catch-up)
    assert calibration.report()["buckets"][0]["switches_on"] == 1


def test_a_reload_restarts_the_windows_and_keeps_a_switched_off_bucket_off_until_its_probe():
    calibration = LiveCalibration(CONFIG, settings())
    feed(calibration, spec(1, live_ms=50.0), times=4)
    feed(calibration, spec(40, live_ms=6.0), times=3)
    effective = calibration.serve(settings())
    assert speculating(effective) == [False, True]
    report = calibration.report()
    assert report["buckets"][1]["speculative"]["iterations"] == 0 and report["buckets"][0]["switches_off"] == 1
    assert speculating(feed(calibration, plain(1, 5.0), times=5)) == [True, True]  # the probe still runs
    # A profile whose bucket no longer matches, or says plain itself, carries no gate state over.
    feed(calibration, spec(1, live_ms=50.0), times=4)
    reshaped = PolicySettings(buckets=(BucketSettings(3, SHAPE), BucketSettings(64, SHAPE)),
                              costs=settings().costs)
    assert speculating(calibration.serve(reshaped)) == [True, True]
    feed(calibration, spec(1, live_ms=50.0), times=4)
    assert speculating(calibration.serve(settings(speculate=False))) == [False, True]
    assert speculating(calibration.serve(settings())) == [True, True]


def test_the_live_fit_recovers_planted_host_terms():
    calibration = LiveCalibration(CONFIG, settings())
    for i in range(CONFIG.window):
        verified, depth = 2 + i % 5, 1 + i % 3
        live = 10.0 + 2.0 + 0.5 * (depth - 1) + 0.25 * verified  # forwards 10, spec_base 2, per_layer .5 per expansion
        cost = IterationCost(1, 10, depth, verified, 20, live, PLAIN_MS, charged(10.0, 10.0))  # pays: stays on
        calibration.observe(plan_for(calibration, 1), cost)
    assert calibration.report(samples=False)["buckets"][0]["overhead"]["live"] is None, "the scrape fits nothing"
    report = calibration.report()["buckets"][0]
    assert report["refits"] == 1 and calibration.report()["buckets"][0]["refits"] == 1, "one fit per window"
    assert report["overhead"]["live"] == {"plain": 0.0, "spec_base": pytest.approx(2.0),
                                          "per_layer": pytest.approx(0.5), "per_token": pytest.approx(0.25)}
    assert report["overhead"]["profile"] == {"plain": 0.0, "spec_base": 0.0, "per_layer": 0.0, "per_token": 0.0}
    assert len(report["step_samples"]) == CONFIG.window
    assert report["step_samples"][0] == {"batch_size": 1, "context_len": 10, "depth": 1, "verified": 2,
                                         "residual_ms": pytest.approx(2.0 + 0.25 * 2)}


@pytest.mark.parametrize("field, value, message", [
    ("window", 0, "window must be an integer >= 1, got 0"),
    ("min_samples", 9, r"min_samples must be <= window \(8\), got 9"),
    ("max_probe_after", 4, r"max_probe_after must be >= probe_after \(5\), got 4"),
    ("min_plain_samples", 9, r"min_plain_samples must be <= plain_window \(8\), got 9"),
])
def test_config_errors_name_the_field_and_the_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        replace(CONFIG, **{field: value})


# ------------------------------------------------ exploration of profile-off buckets

def run(calibration: LiveCalibration, batch: int, iterations: int, spec_ms: float, plain_ms: float,
        saturated: bool = False) -> list[bool]:
    """``iterations`` iterations of bucket ``batch`` as the engine would run them: each
    speculates when the gate's current settings say so.  Returns which ones speculated."""
    ran = []
    for _ in range(iterations):
        on = calibration._effective().for_batch(batch).speculate
        cost = spec(batch, live_ms=spec_ms) if on else plain(batch, live_ms=plain_ms)
        calibration.observe(plan_for(calibration, batch), cost, saturated=saturated)
        ran.append(on)
    return ran


def test_a_profile_off_bucket_turns_on_within_a_bounded_number_of_iterations_when_speculation_pays():
    calibration = LiveCalibration(CONFIG, settings(speculate=False))
    wait = CONFIG.explore_after
    assert wait == 245  # (min_samples + 1) x (1 / 0.02 - 1): one exploration is 2 % of the iterations
    # Speculating commits 3 tokens in 6 ms (0.5 tok/ms) against plain decoding's 1 in 5 ms (0.2 tok/ms).
    ran = run(calibration, 1, wait + 1 + CONFIG.min_samples + 20, spec_ms=6.0, plain_ms=5.0)
    assert ran.index(True) == wait  # the exploration starts after `wait` plain iterations
    assert all(ran[wait:])  # and stays on: speculation paid
    bucket = calibration.report()["buckets"][0]
    assert bucket["switches_on"] == 1 and bucket["speculate_live"] and bucket["explores"]
    assert bucket["probe_extra_ms"] < 0  # the exploration gained time against plain decoding


def test_a_profile_off_bucket_stays_off_when_speculation_does_not_pay_and_explores_at_most_its_share():
    calibration = LiveCalibration(CONFIG, settings(speculate=False))
    # Speculating commits 3 tokens in 30 ms (0.1 tok/ms): half plain decoding's rate.
    ran = run(calibration, 1, 5000, spec_ms=30.0, plain_ms=5.0)
    assert sum(ran) / len(ran) <= CONFIG.explore_share
    assert not ran[-1] and sum(ran) >= CONFIG.min_samples + 1  # it did explore, and went back off
    bucket = calibration.report()["buckets"][0]
    assert bucket["switches_on"] == 0 and bucket["switches_off"] >= 1
    assert bucket["probe_iterations"] == sum(ran)
    # Each speculative iteration cost 30 ms where plain decoding commits its 3 tokens in 15.
    assert bucket["probe_extra_ms"] == pytest.approx(15.0 * sum(ran))


def test_no_exploration_starts_while_requests_wait_for_a_slot():
    calibration = LiveCalibration(CONFIG, settings(speculate=False))
    assert not any(run(calibration, 1, 2 * CONFIG.explore_after, spec_ms=6.0, plain_ms=5.0, saturated=True))
    assert run(calibration, 1, 1, spec_ms=6.0, plain_ms=5.0)[0] is False  # the first iteration with room starts it
    assert run(calibration, 1, 1, spec_ms=6.0, plain_ms=5.0)[0] is True


def test_without_an_explore_share_or_switching_a_profile_off_bucket_never_speculates():
    for config in (replace(CONFIG, explore_share=0.0), replace(CONFIG, switching=False)):
        calibration = LiveCalibration(config, settings(speculate=False))
        assert not any(run(calibration, 1, 1000, spec_ms=6.0, plain_ms=5.0))


@pytest.mark.parametrize("share", [-0.01, 0.05, True])
def test_an_explore_share_outside_two_percent_is_refused(share):
    with pytest.raises(ValueError, match="explore_share must be in"):
        LiveGateConfig(explore_share=share)


def test_near_break_even_a_bucket_keeps_its_state_instead_of_flapping():
    """Speculation within `margin` of plain decoding: a speculating bucket stays on and a
    switched-off one stays off (its probe must win by the margin); without a margin the
    same rates switch."""
    # 3 tokens in 15.5 ms (0.1935 tok/ms) against plain decoding's 1 in 5 ms (0.2): 3 % behind.
    behind = replace(CONFIG, margin=0.05)
    calibration = LiveCalibration(behind, settings())
    assert speculating(feed(calibration, spec(1, live_ms=15.5), times=40) or calibration._effective()) == [True, True]
    assert calibration.report()["buckets"][0]["switches_off"] == 0
    no_margin = LiveCalibration(replace(CONFIG, margin=0.0), settings())
    assert speculating(feed(no_margin, spec(1, live_ms=15.5), times=4)) == [False, True]
    # A profile-off bucket whose exploration wins by 3 % (3 tokens in 14.5 ms) stays off.
    off = LiveCalibration(behind, settings(speculate=False))
    ran = run(off, 1, CONFIG.explore_after + 1 + CONFIG.min_samples + 10, spec_ms=14.5, plain_ms=5.0)
    assert sum(ran) == CONFIG.min_samples + 1 and not ran[-1]
    assert off.report()["buckets"][0]["switches_on"] == 0


@pytest.mark.parametrize("margin", [-0.1, 1.0, True])
def test_a_margin_outside_zero_to_one_is_refused(margin):
    with pytest.raises(ValueError, match="margin must be in"):
        LiveGateConfig(margin=margin)
