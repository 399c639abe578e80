"""The live gate (autotune/gate.py, confirm.py): CAST is confirmed live against live
plain decoding, a bucket that loses live is published ``speculate: false``, and a
live/predicted mismatch beyond the margin refits the host overhead once from the live
steps.  Live rates are planted through ``live_check`` (no timing in a unit test); one
test runs the real interleaved live runs on the tiny engine."""

from dataclasses import replace

import pytest

from autotune.confirm import Confirmation, confirm_live, prompt_slices
from autotune.costs import measured_costs
from autotune.errors import AutotuneError
from autotune.gate import live_gate, per_bucket
from autotune.overhead import LIVE, step_charge_ms
from autotune.report import show, tuned
from autotune.store import Store, TimedStep
from autotune.tuner import BucketResult, replay_settings, switched_off
from autotune.workflow import TuneConfig, tune_and_publish
from sglang_cast.cast import BucketSettings, PolicySettings, TreeShape
from sglang_cast.engine.timing import Timing
from sglang_cast.profile import load_profile
from support.autotune import GRID, SETUP, SPACE, fill, tiny_pair, tiny_prompts

PLAIN_HOST_MS = 5.0  # planted: what plain decoding's live steps cost beyond their forward


def planted_costs(store: Store) -> None:
    """Newer rows than the template's timed grid (the newest row wins): linear curves
    with a cheap draft, so CAST's trees win in replay at both batch sizes, every run."""
    for point in GRID.points():
        slope, fixed = (1.0, 10.0) if point.role == "target" else (0.05, 0.5)
        ms = fixed * point.batch_size + slope * point.n * point.batch_size
        store.add_measurement(SETUP, point.role, point.batch_size, point.context_len, point.n,
                              Timing(ms, ms, ms, 1), 0.0)


class StandInCosts:
    """What ``live_gate`` reads of ``MeasuredCosts``: a cost model without host overhead
    (``costs.overhead``) and the stored steps (``steps``)."""

    class Model:
        overhead = None

    costs, steps = Model(), {}


def tuned_bucket(size: int, replayed: float = 100.0, vanilla: float = 50.0) -> BucketResult:
    """A tuned bucket (top-k 2, depth 2, m 4) whose best tree replays at ``replayed`` tokens/s."""
    return BucketResult(BucketSettings(size, TreeShape(2, 2, 4)), f"s-b{size}", 0, 1, 1, replayed, 2.0, 0,
                        {"vanilla": vanilla, "eagle2": 80.0})


def planted(batch: int, predicted_cast: float, predicted_plain: float, live_cast: float, live_plain: float,
            plain_residual_ms: float = PLAIN_HOST_MS, speed: float = 1.0,
            charged_over_predicted: float = 1.0) -> Confirmation:
    """A confirmation with the given rates (two identical rounds each) and live steps
    whose plain residual is ``plain_residual_ms`` and speculative residual 2 ms at the
    profile's speed, on a machine running ``speed`` times slower (its steps too).

    The cost model's charges for those steps are planted so that the steps run off
    their charges as the live rates run off the predicted ones (a method at half its
    predicted rate took twice its charge), times ``charged_over_predicted``: a replay
    whose iterations are not the live run's (another batch mix) predicts rates that far
    off while every step costs what it was charged."""
    cast_steps = tuple(TimedStep(batch, 40, 2, 4, 3 * batch, 12.0 * speed, 10.0) for _ in range(4))
    plain_steps = tuple(TimedStep(batch, 40, 0, 0, batch, (11.0 + plain_residual_ms) * speed, 11.0)
                        for _ in range(4))

    def charge(steps, live, predicted):
        return sum(s.step_ms for s in steps) * live / predicted * charged_over_predicted

    return Confirmation(batch, batch, 2, 3, predicted_cast, predicted_plain, (live_cast,) * 2, (live_plain,) * 2,
                        2.0, 2.5, speed, charge(cast_steps, live_cast, predicted_cast),
                        charge(plain_steps, live_plain, predicted_plain), cast_steps, plain_steps)


def config_for(tmp_path, **overrides) -> TuneConfig:
    values = dict(label="tiny", output=tmp_path / "profiles" / "tiny.yaml", buckets=(1, 2), trials=4, space=SPACE,
                  confirm_prompts=1, confirm_max_new_tokens=6, context_length=128, live_margin=0.15)
    return TuneConfig(**(values | overrides))


class PlantedLive:
    """``live_check`` with planted live rates: ``live(size, predicted cast, predicted plain, call)``
    answers (live cast, live plain); predictions are the real replay of the bucket's settings."""

    def __init__(self, store: Store, live, speed: float = 1.0, slices: dict | None = None) -> None:
        self.traces = store.traces("tiny-target", "mirror-draft")
        self.live = live
        self.speed = speed
        self.slices = slices or {}  # bucket -> its planted per-slice speedups
        self.calls: list[tuple[int, PolicySettings]] = []

    def __call__(self, settings: PolicySettings, sizes: list[int]) -> dict[int, Confirmation]:
        return {size: self.confirm(settings, size) for size in sizes}

    def confirm(self, settings: PolicySettings, size: int) -> Confirmation:
        mine = [s.trace for s in self.traces if settings.for_batch(s.batch_size).max_batch_size == size]
        cast, plain = (replay_settings(mine, settings, p).tokens_per_s for p in ("cast", "vanilla"))
        self.calls.append((size, settings))
        live_cast, live_plain = self.live(size, cast, plain, len(self.calls))
        check = planted(size, cast, plain, live_cast, live_plain, speed=self.speed)
        return replace(check, slice_speedups=self.slices.get(size, ()))


def test_a_bucket_whose_live_cast_loses_to_live_plain_is_published_speculate_false(tmp_path):
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    # Bucket 1: CAST 5 % under plain decoding live; bucket 2: CAST as predicted.  A wide margin: no refit.
    live = PlantedLive(store, lambda size, cast, plain, _: (0.95 * plain, plain) if size == 1 else (cast, plain))
    said = []
    config = config_for(tmp_path, live_margin=5.0)
    outcome = tune_and_publish(pair, store, SETUP, config, tiny_prompts().head(3), progress=False, live_check=live,
                               say=said.append)
    published = load_profile(config.output).profile
    assert [b.speculate for b in published.settings.buckets] == [False, True]
    assert [r.off_by for r in outcome.results] == ["live", None]
    gate = published.provenance["live_gate"]
    assert gate["off_by_live"] == [1] and gate["off_by_replay"] == [] and gate["refit"] is None
    rows = published.provenance["live_confirmation"]
    assert [(c["max_batch_size"], c["speculate"]) for c in rows] == [(1, False), (2, True)]
    assert rows[0]["live_speedup"] == pytest.approx(0.95) and rows[0]["live_plain_tokens_per_s"] > 0
    assert not any("refit" in line for line in said)  # within the margin: no refit
    # No whole steps stored for this setup: tune says so, once.
    assert [line for line in said if "host overhead" in line] == [
        "host overhead: not measured for weight format fp32 (no whole steps stored): its costs are the forwards' "
        "alone; `cast-autotune profile` measures it"]
    assert [size for size, _ in live.calls] == [1, 2]  # each bucket confirmed once
    text = show(store)
    assert "live gate of the latest publication" in text and "no live gate recorded" not in text


@pytest.mark.parametrize("min_speedup, published", [(None, [False, True]), (1.0, [True, True])])
def test_a_live_win_within_the_noise_margin_is_published_off(tmp_path, min_speedup, published):
    """Bucket 1 beats plain decoding live by 3 %: by default (the server's 5 % hysteresis)
    that is noise and the bucket decodes plainly; ``--live-min-speedup 1`` keeps any win."""
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    live = PlantedLive(store, lambda size, cast, plain, _: (1.03 * plain, plain) if size == 1 else (cast, plain))
    overrides = {} if min_speedup is None else {"live_min_speedup": min_speedup}
    config = config_for(tmp_path, live_margin=5.0, **overrides)
    outcome = tune_and_publish(pair, store, SETUP, config, tiny_prompts().head(3), progress=False, live_check=live,
                               say=lambda line: None)
    profile = load_profile(config.output).profile
    assert [b.speculate for b in profile.settings.buckets] == published
    assert [r.off_by for r in outcome.results] == [None if on else "live" for on in published]
    assert profile.provenance["live_gate"]["min_speedup"] == (1.05 if min_speedup is None else 1.0)


@pytest.mark.parametrize("slices, published", [((1.2, 1.2, 0.98), [False, True]), ((1.2, 1.16, 1.02), [True, True])])
def test_a_bucket_that_loses_on_one_slice_of_the_prompts_is_published_off(tmp_path, slices, published):
    """Bucket 1 beats plain decoding by 13 % over all its prompts; it speculates only if
    it does not lose to plain decoding on any slice of them either."""
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    live = PlantedLive(store, lambda size, cast, plain, _: (1.13 * plain, plain) if size == 1 else (cast, plain),
                       slices={1: slices})
    config = config_for(tmp_path, live_margin=5.0)
    outcome = tune_and_publish(pair, store, SETUP, config, tiny_prompts().head(3), progress=False, live_check=live,
                               say=lambda line: None)
    profile = load_profile(config.output).profile
    assert [b.speculate for b in profile.settings.buckets] == published
    assert [r.off_by for r in outcome.results] == [None if on else "live" for on in published]
    rows = profile.provenance["live_confirmation"]
    assert rows[0]["live_speedup"] == pytest.approx(1.13) and rows[0]["slice_speedups"] == list(slices)
    assert profile.provenance["live_gate"]["slices"] == 3
    # Both reports name the worst slice: tune's lines and `show`'s table.
    assert f"worst of 3 prompt slices {min(slices):.2f}x" in tuned(outcome, str)
    assert "worst slice" in show(store)


def test_a_live_miss_beyond_the_margin_refits_the_overhead_once_and_publishes_it(tmp_path):
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    # First pass: CAST runs at half its prediction in bucket 1; after the refit, as predicted.
    live = PlantedLive(store, lambda size, cast, plain, call: (0.5 * cast if call == 1 else cast, plain))
    said = []
    config = config_for(tmp_path)
    outcome = tune_and_publish(pair, store, SETUP, config, tiny_prompts().head(3), progress=False, live_check=live,
                               say=said.append)
    refit_lines = [line for line in said if "refitting" in line]
    assert len(refit_lines) == 1 and "bucket <= 1" in refit_lines[0] and "±15%" in refit_lines[0]
    assert not any("still beyond" in line for line in said)
    # Confirmed: both buckets, then both again with the refitted costs; re-tuned: bucket 1 only.
    assert [size for size, _ in live.calls] == [1, 2, 1, 2]
    assert live.calls[0][1].costs.overhead is None
    refitted = live.calls[2][1].costs.overhead
    assert refitted is not None and refitted.terms(1, 40).plain == pytest.approx(PLAIN_HOST_MS)
    assert outcome.results[0].study.endswith("-b1-refit") and not outcome.results[1].study.endswith("-refit")
    published = load_profile(config.output).profile
    assert published.settings.costs.overhead.to_dict() == refitted.to_dict()
    gate = published.provenance["live_gate"]
    assert gate["refit"]["buckets"] == [1] and gate["refit"]["steps"] == {LIVE: 16}
    assert published.provenance["cost_tables"]["overhead"]["steps"] == {LIVE: 16}
    assert len(store.step_records(SETUP, LIVE)) == 16  # the live steps are stored, a later tune fits them too
    assert measured_costs(store, SETUP).costs.overhead.to_dict() == refitted.to_dict()


def test_a_refit_on_a_drifted_machine_fits_its_steps_at_the_profiles_speed(tmp_path):
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    # Every step 1.25x slower than profiled (and said so); CAST at half its prediction
    # even at the profile's speed in bucket 1's first pass: a refit, whose plain host
    # term must be the planted 5 ms, not the drift's extra 4 ms.
    speed = 1.25
    live = PlantedLive(store, lambda size, cast, plain, call: ((0.5 if call == 1 else 1.0) * cast / speed,
                                                               plain / speed), speed=speed)
    said = []
    tune_and_publish(pair, store, SETUP, config_for(tmp_path), tiny_prompts().head(3), progress=False,
                     live_check=live, say=said.append)
    assert sum("refitting" in line for line in said) == 1
    drift = [line for line in said if "off its profiled time" in line]
    assert drift and "1.25x" in drift[0] and "--max-age 0" in drift[0]
    refitted = live.calls[2][1].costs.overhead
    assert refitted.terms(1, 40).plain == pytest.approx(PLAIN_HOST_MS)


def test_a_uniformly_slower_machine_is_drift_not_a_miss():
    said = []
    slower = 1.3
    gate = live_gate([tuned_bucket(1)], StandInCosts(),
                     per_bucket(lambda settings, size: planted(size, 100.0, 50.0, 100.0 / slower, 50.0 / slower,
                                                               speed=slower)),
                     lambda c: pytest.fail("no refit"), lambda *a: pytest.fail("no re-tune"), 0.15, said.append,
                     min_speedup=1.05)
    assert gate.refit is None and len(said) == 1 and "1.30x" in said[0]
    assert gate.live_summaries()[0]["plain_live_over_predicted_at_profile_speed"] == pytest.approx(1.0)


def test_no_refit_and_no_gate_when_live_matches_and_cast_wins():
    results = [tuned_bucket(1)]
    said, refits = [], []

    def check(settings, size):
        return planted(size, 100.0, 50.0, 110.0, 52.0)

    gate = live_gate(results, StandInCosts(), per_bucket(check), refits.append, lambda *a: pytest.fail("no re-tune"), 0.15,
                     said.append, min_speedup=1.05)
    assert gate.results == results and gate.refit is None and not said and not refits
    assert gate.live_summaries()[0]["speculate"] is True
    # Rates as replayed, but every step 1.16x its charge: beyond a 15 % margin, within a 20 % one.
    slow_steps = planted(1, 100.0, 50.0, 100.0, 50.0, charged_over_predicted=1 / 1.16)
    assert slow_steps.live_over_predicted == pytest.approx(1.0)
    assert slow_steps.cast_measured_over_charged == pytest.approx(1.16)
    assert slow_steps.beyond(0.15) and not slow_steps.beyond(0.20)
    assert planted(1, 100.0, 50.0, 100.0, 41.0).beyond(0.15)  # plain decoding's steps off their charge count too


def test_rates_off_their_replayed_prediction_with_steps_at_their_charge_are_no_miss():
    """The H200 case: replay of the tuning traces (a shrinking batch) predicted plain
    decoding 27 % slow while every live step cost what it was charged: no refit."""
    mix = planted(16, 2350.0, 2500.0, 3225.0, 3437.0, charged_over_predicted=2500.0 / 3437.0)
    assert mix.plain_live_over_predicted == pytest.approx(3437.0 / 2500.0)
    assert mix.plain_measured_over_charged == pytest.approx(1.0)
    assert mix.cast_measured_over_charged == pytest.approx(1.0, abs=0.01)
    assert not mix.beyond(0.15)
    gate = live_gate([tuned_bucket(16)], StandInCosts(), per_bucket(lambda settings, size: mix),
                     lambda c: pytest.fail("no refit"), lambda *a: pytest.fail("no re-tune"), 0.15,
                     lambda line: pytest.fail(line), min_speedup=1.05)
    assert gate.refit is None and gate.results[0].off_by == "live"  # CAST lost live: off, all the same
    summary = gate.live_summaries()[0]
    assert summary["plain_measured_over_charged"] == pytest.approx(1.0)


def test_an_off_bucket_is_confirmed_live_and_its_plain_miss_refits_but_live_never_turns_it_on():
    on = tuned_bucket(1)
    off = switched_off(tuned_bucket(2, replayed=60.0, vanilla=90.0), "replay")
    calls, refits, retuned = [], [], []

    def check(settings, size):
        calls.append(size)
        if size == 1:
            return planted(1, 100.0, 50.0, 100.0, 50.0)
        # The off bucket's CAST engine decodes plainly: a little under plain by noise, and both
        # at half the predicted plain rate the first time (a machine slower than profiled).
        first = calls.count(2) == 1
        return planted(2, 90.0, 90.0, (44.0 if first else 88.0), (45.0 if first else 90.0))

    def refit(confirmations):
        refits.append(sorted(c.batch_size for c in confirmations))
        return StandInCosts()

    def retune(size, costs):
        retuned.append(size)
        return off

    said = []
    gate = live_gate([on, off], StandInCosts(), per_bucket(check), refit, retune, 0.15, said.append, min_speedup=1.05)
    assert calls == [1, 2, 1, 2]  # both buckets confirmed, then both again after the refit
    assert refits == [[1, 2]] and retuned == [2]
    assert len(said) == 1 and "bucket <= 2" in said[0] and "plain decoding's 4 200%" in said[0]
    # Live below plain in an off bucket is noise between two plain decoders: it stays off by replay.
    assert [r.off_by for r in gate.results] == [None, "replay"]
    assert [row["max_batch_size"] for row in gate.live_summaries()] == [1, 2]
    assert gate.live_summaries()[1]["speculate"] is False


def logged_runs(monkeypatch) -> list[tuple[str, int | None, tuple[str, ...]]]:
    """Every ``run_steps`` call of ``confirm_live`` from now on: (policy, step limit, prompts)."""
    import autotune.confirm as confirm

    order = []
    real = confirm.run_steps

    def logged(engine, prompts, params, warmup=0, limit=None):
        order.append((engine.policy.name, limit, tuple(prompts)))
        return real(engine, prompts, params, warmup, limit)

    monkeypatch.setattr(confirm, "run_steps", logged)
    return order


def test_confirm_live_interleaves_cast_and_plain_rounds_on_the_same_prompts(tmp_path, monkeypatch):
    from autotune.confirm import WARMUP_STEPS

    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    costs = measured_costs(store, SETUP).costs
    settings = PolicySettings(buckets=(BucketSettings(2, TreeShape(2, 2, 5)),), costs=costs)
    order = logged_runs(monkeypatch)
    prompts = tiny_prompts().head(3)
    check = confirm_live(pair, settings, prompts, 2, 6, 128, store.traces("tiny-target", "mirror-draft"), rounds=2)
    batch = tuple(pair.format_prompt(t) for t in prompts.texts[:2])
    warm = [(name, WARMUP_STEPS, batch) for name in ("cast", "vanilla")]
    assert order == warm + [("cast", None, batch), ("vanilla", None, batch)] * 2  # whole batches: the third waits
    assert check.prompts == 2  # what was decoded
    assert len(check.live_cast_rounds) == 2 and len(check.live_plain_rounds) == 2
    assert all(r > 0 for r in check.live_cast_rounds + check.live_plain_rounds)
    assert all(s.depth == 0 and s.verified == 0 and s.tokens == s.batch_size for s in check.plain_steps)
    assert any(s.depth > 0 for s in check.cast_steps)
    # The cost check charges exactly the steps that ran, each with its own batch, depth and verified count.
    assert check.charged_cast_ms == pytest.approx(sum(step_charge_ms(s, costs) for s in check.cast_steps))
    assert check.charged_plain_ms == pytest.approx(sum(step_charge_ms(s, costs) for s in check.plain_steps))
    summary = check.summary()
    assert summary["cast_measured_over_charged"] > 0 and summary["plain_measured_over_charged"] > 0
    assert summary["timed_steps"] == {"cast": len(check.cast_steps), "plain": len(check.plain_steps)}
    assert summary["live_speedup"] == pytest.approx(check.live_cast_tokens_per_s / check.live_plain_tokens_per_s,
                                                    rel=1e-3)


def test_confirm_live_decodes_each_slice_of_the_prompts_with_both_methods_every_round(tmp_path, monkeypatch):
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    settings = PolicySettings(buckets=(BucketSettings(2, TreeShape(2, 2, 5)),),
                              costs=measured_costs(store, SETUP).costs)
    order = logged_runs(monkeypatch)
    prompts = tiny_prompts().head(5)
    check = confirm_live(pair, settings, prompts, 2, 6, 128, store.traces("tiny-target", "mirror-draft"), rounds=2,
                         slices=2)
    first, second = (tuple(pair.format_prompt(t) for t in prompts.texts[i:i + 2]) for i in (0, 2))
    timed = [(name, None, part) for part in (first, second) for name in ("cast", "vanilla")]
    assert order[2:] == timed * 2  # the fifth prompt makes no third slice of a batch
    assert len(check.slice_speedups) == 2 and all(v > 0 for v in check.slice_speedups)
    assert len(check.live_cast_rounds) == 2  # a round's rate pools its slices
    assert check.worst_slice_speedup == min(check.slice_speedups)


def test_prompts_are_cut_into_as_many_slices_of_whole_batches_as_they_hold():
    texts = [str(i) for i in range(7)]
    assert prompt_slices(texts, 2, 3) == [["0", "1"], ["2", "3"], ["4", "5"]]
    assert prompt_slices(texts, 3, 3) == [["0", "1", "2"], ["3", "4", "5"]]
    assert prompt_slices(texts, 1, 2) == [["0", "1", "2"], ["3", "4", "5"]]
    assert prompt_slices(texts, 4, 1) == [["0", "1", "2", "3"]]  # no partial batch at a smaller batch size
    assert prompt_slices(texts, 8, 3) == [texts]  # fewer prompts than a batch: one slice of them all
    assert prompt_slices(texts, 1, 1) == [texts]


def test_a_live_run_too_short_to_time_a_step_is_one_clear_error(tmp_path):
    """One new token per prompt: every request finishes in the step that admitted it, so
    no step is timed; the gate names the flag instead of dividing by zero."""
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    planted_costs(store)
    settings = PolicySettings(buckets=(BucketSettings(2, TreeShape(2, 2, 5)),),
                              costs=measured_costs(store, SETUP).costs)
    with pytest.raises(AutotuneError, match=r"--confirm-max-new-tokens: the live gate at B=2 timed no CAST step"):
        confirm_live(pair, settings, tiny_prompts().head(2), 2, 1, 128, store.traces("tiny-target", "mirror-draft"),
                     rounds=2)


def test_a_miss_on_costs_without_measurements_is_reported_and_not_refitted():
    """Tables calibrated from another machine's profile (or another engine's than the
    live runs time) have no measurements a refit could add to: the miss is one line,
    the gate still decides."""
    said = []
    gate = live_gate([tuned_bucket(1)], StandInCosts(),
                     per_bucket(lambda settings, size: planted(size, 100.0, 50.0, 40.0, 50.0)), None, lambda *a: pytest.fail("no re-tune"), 0.15, said.append, min_speedup=1.05)
    assert len(said) == 1 and "not refitted" in said[0] and gate.refit is None
    assert gate.results[0].settings.speculate is False and gate.results[0].off_by == "live"
