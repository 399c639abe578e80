"""The closed loop while serving (issue 33 item 3): a real server on the tiny engine,
greedy requests, and a planted slowdown — every speculative iteration sleeps inside
its timed draft phase once the bucket has run normally for a while.  The live gate
must switch that bucket to plain decoding within 200 iterations, drop no request,
leave every output identical to plain greedy decoding, and show it in ``/metrics``
and ``/server_info``.

The profile's plain step is charged 100 ms (``CostModel.linear(1, 99)``), far above
what the tiny model really takes, so the undelayed speculation wins by a wide margin
on any machine (several times the table's plain rate, measured on a loaded 2-core
CPU), and the planted 1 s per speculative step loses by as wide a margin: the test
asserts what the gate does with the two, not how fast anything runs."""

import time

import pytest

from sglang_cast.cast import BucketSettings, CostModel, PolicySettings
from sglang_cast.server.config import LiveGateConfig
from support.server import MODEL, SHAPE, complete_all, metric, reference, serve, tiny_engine

PROMPTS = ["alpha", "beta"]
MAX_TOKENS = 120
UNDELAYED_STEPS = 24  # speculative iterations before the slowdown: past min_samples (16), so the gate is live
DELAY_S = 1.0
SETTINGS = PolicySettings(buckets=(BucketSettings(max_batch_size=64, shape=SHAPE),),
                          costs=CostModel.linear(1.0, 99.0, draft_ratio=0.2))
# No probe within the test: the switch itself is what is checked (probes: test_live_calibration).
GATE = LiveGateConfig(probe_after=1024, max_probe_after=1024)


class PlantedSlowdown:
    """Test-only stand-in for a machine that got slower: wraps the engine's speculation
    strategy and, after ``after`` speculative iterations, sleeps ``delay_s`` in every
    speculative iteration's draft phase, which the engine's record times."""

    def __init__(self, engine, delay_s: float, after: int, on_first_delay=None) -> None:
        self.inner = engine.runner.speculation
        engine.runner.speculation = self
        self.delay_s, self.after, self.on_first_delay = delay_s, after, on_first_delay
        self.speculative_steps = 0
        self.delayed_steps = 0

    def draft(self, runner, batch):
        drafted = self.inner.draft(runner, batch)
        if drafted.speculated:
            self.speculative_steps += 1
            if self.speculative_steps > self.after:
                if self.delayed_steps == 0 and self.on_first_delay is not None:
                    self.on_first_delay()
                self.delayed_steps += 1
                time.sleep(self.delay_s)
        return drafted

    def accept(self, runner, batch, drafted, logits):
        return self.inner.accept(runner, batch, drafted, logits)


def bucket_state(client):
    return client.get("/server_info").json()["cast_live_calibration"]["buckets"][0]


def test_a_planted_slowdown_switches_the_bucket_off_without_dropping_or_changing_a_request(target):
    engine = tiny_engine("cast", settings=SETTINGS, target=target)
    expected = {p: r.text for p, r in zip(PROMPTS, reference(target, PROMPTS, MAX_TOKENS))}
    with serve(engine, live_gate=GATE) as server, server.client() as c:
        calibration = server.app.state.server.worker.calibration
        before_delay = {}
        slow = PlantedSlowdown(engine, DELAY_S, UNDELAYED_STEPS,
                               on_first_delay=lambda: before_delay.update(calibration.report(samples=False)
                                                                          ["buckets"][0]))
        first = c.get("/metrics").text
        assert metric(first, 'cast_speculation_on{bucket="64"}') == 1.0
        assert metric(first, "cast_live_gate_switches_off_total") == 0.0

        results = complete_all(server, PROMPTS, MAX_TOKENS)

        assert {p: r.status_code for p, r in results.items()} == {p: 200 for p in PROMPTS}
        assert {p: r.json()["choices"][0]["text"] for p, r in results.items()} == expected
        assert metric(c.get("/metrics").text, "cast_requests_cancelled_total") == 0.0

        # The undelayed speculation ran past min_samples without being switched off ...
        assert before_delay["switches_off"] == 0 and before_delay["speculate_live"]
        assert before_delay["speculative"]["iterations"] >= 16
        # ... and the slowdown switched it off within 200 iterations (all of them slowed ones).
        state = bucket_state(c)
        assert state["switches_off"] == 1 and state["probes"] == 0 and not state["speculate_live"]
        assert 1 <= slow.delayed_steps <= 200
        assert state["plain"]["iterations"] > 0, "the rest of the requests decoded plainly"
        assert engine.policy.settings.buckets[0].speculate is False
        assert calibration.served.buckets[0].speculate is True, "the served profile itself is not rewritten"

        after = c.get("/metrics").text
        assert metric(after, 'cast_speculation_on{bucket="64"}') == 0.0
        assert metric(after, 'cast_live_gate_switches_off_total{bucket="64"}') == 1.0
        assert metric(after, 'cast_iteration_live_ms{bucket="64",kind="plain"}') > 0
        assert metric(after, 'cast_iteration_predicted_ms{bucket="64",kind="plain"}') == pytest.approx(100.0)
        # Every iteration the engine ran was charged (the histogram counts every record).
        assert metric(after, 'cast_live_iterations_total{bucket="64"}') == metric(after,
                                                                                "cast_iteration_batch_size_count")
        # A hot-reload (what ProfileReloader hands the worker) restarts the windows and keeps the
        # bucket off until its probe.
        server.app.state.server.worker.reconfigure(SETTINGS).result(timeout=30)
        reloaded = bucket_state(c)
        assert engine.policy.settings.buckets[0].speculate is False and not reloaded["speculate_live"]
        assert reloaded["switches_off"] == 1 and reloaded["plain"]["iterations"] == 0
        print(f"planted slowdown: switched off after {slow.delayed_steps} slowed iterations; "
              f"{state['plain']['iterations']} plain iterations followed")


def test_server_info_exports_what_the_daemon_ingests(target):
    engine = tiny_engine("cast", settings=SETTINGS, target=target)
    with serve(engine, live_gate=LiveGateConfig()) as server, server.client() as c:
        assert all(r.status_code == 200 for r in complete_all(server, PROMPTS[:1], MAX_TOKENS).values())
        info = c.get("/server_info").json()["cast_live_calibration"]
    assert info["switching"] is True and info["config"]["window"] == 32
    bucket = info["buckets"][0]
    assert bucket["max_batch_size"] == 64 and bucket["speculate_served"] is True
    spec = bucket["speculative"]
    assert spec["iterations"] >= 1 and spec["live_ms"] > 0 and spec["predicted_ms"] > 0
    assert spec["live_over_predicted"] == pytest.approx(spec["live_ms"] / spec["predicted_ms"])
    assert set(bucket["overhead"]) == {"at", "profile", "live"}
    samples = bucket["step_samples"]
    assert len(samples) == spec["iterations"] + bucket["plain"]["iterations"]
    assert set(samples[0]) == {"batch_size", "context_len", "depth", "verified", "residual_ms"}
    assert samples[0]["batch_size"] == 1 and samples[0]["depth"] >= 1


def test_the_gate_switches_nothing_under_a_policy_that_ignores_speculate_false(target):
    engine = tiny_engine("eagle2", settings=SETTINGS, target=target)
    PlantedSlowdown(engine, 0.05, after=0)
    with serve(engine, live_gate=LiveGateConfig()) as server, server.client() as c:
        assert all(r.status_code == 200 for r in complete_all(server, PROMPTS[:1], MAX_TOKENS).values())
        info = c.get("/server_info").json()["cast_live_calibration"]
    assert info["switching"] is False
    assert info["buckets"][0]["switches_off"] == 0 and info["buckets"][0]["speculative"]["iterations"] > 16


def test_a_profile_off_bucket_explores_turns_on_where_speculation_pays_and_metrics_show_the_cost(target):
    """The other direction: the profile says ``speculate: false``; the exploration's
    speculative iterations are measured against the live plain ones, each output stays
    greedy decoding's, and ``/metrics`` counts what the exploration cost."""
    off = PolicySettings(buckets=(BucketSettings(max_batch_size=64, shape=SHAPE, speculate=False),),
                         costs=SETTINGS.costs)
    gate = LiveGateConfig(window=4, min_samples=2, explore_share=0.02)
    engine = tiny_engine("cast", settings=off, target=target)
    expected = {p: r.text for p, r in zip(PROMPTS[:1], reference(target, PROMPTS[:1], 200))}
    with serve(engine, live_gate=gate) as server, server.client() as c:
        assert metric(c.get("/metrics").text, 'cast_speculation_on{bucket="64"}') == 0.0
        response = c.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 200,
                                                   "temperature": 0})
        assert response.json()["choices"][0]["text"] == expected[PROMPTS[0]]
        state = bucket_state(c)
        after = c.get("/metrics").text
    assert state["explores"] and state["probes"] >= 1
    assert state["iterations"] >= gate.explore_after + gate.min_samples + 1  # plainly for `explore_after` first
    assert metric(after, 'cast_live_probe_iterations_total{bucket="64"}') >= gate.min_samples + 1
    assert metric(after, 'cast_live_probe_extra_ms{bucket="64"}') == pytest.approx(state["probe_extra_ms"])
    # Each probe turns the bucket on and each switch off ends one turn on (a probe that lost, or
    # a bucket that speculated and then lost its margin, as noise on a loaded CPU can make it),
    # so the bucket speculates now exactly when probes outnumber switches off; /metrics agrees.
    assert state["probes"] - state["switches_off"] == int(state["speculate_live"])
    assert metric(after, 'cast_speculation_on{bucket="64"}') == float(state["speculate_live"])
