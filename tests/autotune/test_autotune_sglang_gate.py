"""``tune --backend sglang``'s live gate (autotune/sglang_gate.py): every bucket in one
SGLang engine per (round, method), CAST and plain alternating, judged from the
worker's logged iterations as the native gate judges; a miss refits the SGLang
setup from SGLang's own steps.  The engines are a planted runner here (their runs
are tests/plugin/test_sglang_plugin_live_runs.py's)."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from autotune.costs import measured_costs
from autotune.overhead import LIVE
from autotune.sglang_backend import SGLANG
from autotune.sglang_gate import GateLoad, SGLangGate
from autotune.store import Setup, Store
from autotune.tuner import assign_buckets
from autotune.workflow import TuneConfig, tune_and_publish
from sglang_cast.cast import BucketSettings, PolicySettings, TreeShape
from sglang_cast.engine.timing import Timing
from sglang_cast.profile import Profile, load_profile
from sglang_cast.sglang_plugin.step_log import LoggedStep
from support.autotune import GRID, SETUP, SPACE, fill, tiny_pair, tiny_prompts

SGLANG_SETUP = Setup(**{**SETUP.columns(), "backend": SGLANG})
PLAIN_HOST_MS = 5.0  # what the planted plain iterations cost beyond their forwards


def cast_step(batch: int, step_ms: float = 12.0) -> LoggedStep:
    return LoggedStep(batch, 40, 2, 4, 3 * batch, step_ms, 10.0)


def plain_step(batch: int, speed: float = 1.0) -> LoggedStep:
    """A plain iteration whose verify forward ran ``speed`` times its 11 ms table charge."""
    return LoggedStep(batch, 40, 0, 0, batch, 11.0 + PLAIN_HOST_MS, 11.0, verify_ms=11.0 * speed,
                      verify_charge_ms=11.0)


class PlantedRunner:
    """``SGLangLiveRuns`` with planted iterations: ``cast_ms(batch, call)`` is a CAST
    iteration's ms at that batch size in the ``call``-th engine (1-based); four
    iterations per slice."""

    def __init__(self, cast_ms=lambda batch, call: 12.0, plain_speed=lambda batch, call: 1.0) -> None:
        self.cast_ms = cast_ms
        self.plain_speed = plain_speed
        self.calls: list[tuple[Profile, bool, dict]] = []

    def run(self, profile, plain, slices, max_new_tokens):
        self.calls.append((profile, plain, slices))
        call = len(self.calls)
        step = (lambda b: plain_step(b, self.plain_speed(b, call))) if plain else (
            lambda b: cast_step(b, self.cast_ms(b, call)))
        return {batch: [[step(batch)] * 4 for _ in parts] for batch, parts in slices.items()}


def planted_costs(store: Store, setup: Setup) -> None:
    """Linear forward curves with a cheap draft under ``setup``: CAST's trees win in replay."""
    for point in GRID.points():
        slope, fixed = (1.0, 10.0) if point.role == "target" else (0.05, 0.5)
        ms = fixed * point.batch_size + slope * point.n * point.batch_size
        store.add_measurement(setup, point.role, point.batch_size, point.context_len, point.n,
                              Timing(ms, ms, ms, 1), 0.0)


def planted_costs_model(store: Store):
    planted_costs(store, SGLANG_SETUP)
    return measured_costs(store, SGLANG_SETUP).costs


def test_every_bucket_is_judged_from_one_engine_per_round_and_method_on_its_logged_iterations(tmp_path):
    store = fill(Store(tmp_path / "a.db"))
    by_bucket = assign_buckets(store.traces("tiny-target", "mirror-draft"), (1, 2))
    # The plain runs' verify forwards ran 0.8x their table charge at B = 1 (1.0x, 0.6x and 0.8x at B = 2).
    runner = PlantedRunner(plain_speed=lambda batch, call: 0.8 if batch == 1 else {2: 1.0, 4: 0.6, 6: 0.8}[call])
    gate = SGLangGate(runner, lambda text: f"<user>{text}</user>")
    settings = PolicySettings((BucketSettings(1, TreeShape(2, 2, 4)), BucketSettings(2, TreeShape(2, 2, 4))),
                              planted_costs_model(store))
    served = []

    def candidate(s):
        served.append(s)
        return Profile("gate", "cpu", "measured", s)

    check = gate.check(by_bucket, candidate, tiny_prompts(), GateLoad(per_slice=2, slices=2, max_new_tokens=8,
                                                                      rounds=3))
    confirmations = check(settings, [1, 2])
    # One engine per (round, method), CAST first in each round, all buckets in each, on one candidate.
    assert [plain for _, plain, _ in runner.calls] == [False, True] * 3
    assert served == [settings] and all(profile.settings is settings for profile, _, _ in runner.calls)
    slices = runner.calls[0][2]
    texts = [f"<user>{t}</user>" for t in tiny_prompts().texts]
    assert slices == {1: [texts[0:2], texts[2:4]], 2: [texts[0:2], texts[2:4]]}  # whole batches, 2 slices
    for size, check_ in confirmations.items():
        assert (check_.batch_size, check_.prompts, check_.rounds) == (size, 4, 3)
        assert check_.speed_factor == pytest.approx(0.8)  # the median of the plain runs' verify speeds
        # Committed tokens over the logged iterations' ms: 3B tokens in 12 ms, B in 16 ms.
        assert check_.live_cast_tokens_per_s == pytest.approx(1000 * 3 * size / 12.0)
        assert check_.live_plain_tokens_per_s == pytest.approx(1000 * size / 16.0)
        assert check_.live_tau == pytest.approx(3.0) and len(check_.cast_steps) == 3 * 2 * 4
        assert check_.slice_speedups == pytest.approx((3 * 16 / 12.0,) * 2)
        assert check_.plain_steps[0].step_ms == 16.0 and check_.plain_steps[0].forward_ms == 11.0


def test_tune_gated_on_sglang_refits_the_sglang_setup_from_its_steps_and_switches_a_loser_off(tmp_path):
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store, SGLANG_SETUP)
    # Bucket 1's CAST iterations take 60 ms (3 tokens: it loses to plain decoding's 3 in 48 ms); plain
    # iterations cost 5 ms beyond their forwards, which the SGLang setup has no overhead for: a miss.
    runner = PlantedRunner(lambda batch, call: 60.0 if batch == 1 else 12.0)
    said = []
    config_output = tmp_path / "profiles" / "tiny.yaml"
    config = TuneConfig(label="tiny", output=config_output, buckets=(1, 2), trials=4, space=SPACE,
                        confirm_prompts=1, confirm_max_new_tokens=6, context_length=128, live_margin=0.15)
    outcome = tune_and_publish(pair, store, SGLANG_SETUP, config, tiny_prompts().head(3), progress=False,
                               say=said.append, sglang_gate=SGLangGate(runner, str))
    assert sum("refitting" in line for line in said) == 1  # refitted, not "not refitted"
    assert len(runner.calls) == 2 * 2 * config.live_rounds  # two passes over every bucket
    steps = store.step_records(SGLANG_SETUP, LIVE)
    assert steps and not store.step_records(SETUP, LIVE)  # stored under the SGLang setup only
    published = load_profile(config_output).profile
    assert published.settings.costs.overhead.terms(1, 40).plain == pytest.approx(PLAIN_HOST_MS)
    assert [b.speculate for b in published.settings.buckets] == [False, True]
    assert outcome.results[0].study.endswith("-b1-refit")  # re-tuned on SGLang's refitted costs: off
    assert published.provenance["live_gate"]["engine"] == SGLANG


def test_a_gate_whose_worker_timed_no_verify_forward_says_the_speed_cannot_be_read(tmp_path):
    store = fill(Store(tmp_path / "a.db"))
    by_bucket = assign_buckets(store.traces("tiny-target", "mirror-draft"), (1,))

    class Untimed(PlantedRunner):
        def run(self, profile, plain, slices, max_new_tokens):
            runs = super().run(profile, plain, slices, max_new_tokens)
            return {b: [[LoggedStep(*astuple(s)[:7]) for s in steps] for steps in parts] for b, parts in runs.items()}

    settings = PolicySettings((BucketSettings(1, TreeShape(2, 2, 4)),), planted_costs_model(store))
    check = SGLangGate(Untimed(), str).check(by_bucket, lambda s: Profile("gate", "cpu", "measured", s),
                                             tiny_prompts(), GateLoad(2, 1, 8, 1))
    with pytest.raises(ValueError, match="B=2: the worker logged no timed verify forward"):
        check(settings, [1])
