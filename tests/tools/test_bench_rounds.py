"""Interleaved rounds (tools/benchkit/rounds.py): warm-up excluded, methods interleaved,
the median and the spread of every round reported, the device clock used."""

from __future__ import annotations

import pytest
import torch

from sglang_cast.cast import CostModel, PolicySettings, Thresholds, TreeShape, make_policy
from tools.benchkit import methods as methodkit
from tools.benchkit import rounds, table
from tools.benchkit.rounds import Measured, Round, interleave

from autotune.models import ModelPair
from support.tiny import CharTokenizer, MirrorDraft, tiny_target

TOKENS = [[1] * 50, [2] * 50]  # 100 tokens per decode


class ScriptedDecode:
    """A fake method whose n-th decode (warm-up included) takes ``seconds[n]``; logs calls."""

    def __init__(self, label: str, seconds: list[float], calls: list[str]) -> None:
        self.label, self.seconds, self.calls = label, list(seconds), calls

    def decode(self) -> Round:
        return Round(TOKENS, self.seconds.pop(0), [])

    def warm_up(self) -> None:
        self.calls.append(f"{self.label} warm-up")
        self.decode()

    def run(self) -> Round:
        self.calls.append(self.label)
        return self.decode()


def test_methods_are_warmed_up_then_interleaved_in_alternating_order():
    calls: list[str] = []
    runners = {label: ScriptedDecode(label, [1.0] * 5, calls) for label in "ABC"}
    measured = interleave(runners, 4)
    assert calls == ["A warm-up", "B warm-up", "C warm-up"] + ["A", "B", "C", "C", "B", "A"] * 2
    assert all(len(m.rounds) == 4 for m in measured.values())


def test_a_slow_first_decode_moves_neither_the_median_nor_the_spread():
    """First use (allocator growth, lazy init) is paid by the untimed warm-up: counted as
    a round, the 10 s decode would be the minimum and the spread 900 %."""
    measured = interleave({"A": ScriptedDecode("A", [10.0, 1.0, 1.0, 1.0], [])}, 3)["A"]
    assert measured.rates == [100.0, 100.0, 100.0]
    assert measured.spread() == {"tokens_per_s_rounds": [100.0, 100.0, 100.0], "tokens_per_s_min": 100.0,
                                 "tokens_per_s_max": 100.0, "spread_pct": 0.0}


def test_the_median_ignores_one_slow_round_and_the_spread_shows_it():
    measured = interleave({"A": ScriptedDecode("A", [1.0, 1.0, 4.0, 0.8], [])}, 3)["A"]
    assert measured.rates == [100.0, 25.0, 125.0]
    assert measured.tokens_per_s == 100.0  # the mean would be 83.3
    assert measured.typical.seconds == 1.0
    assert measured.spread()["spread_pct"] == pytest.approx(100.0)  # (125 - 25) / 100


def test_speedup_rounds_are_paired_by_round():
    fast = Measured([Round(TOKENS, s, []) for s in (0.5, 1.0, 0.5)])
    slow = Measured([Round(TOKENS, s, []) for s in (1.0, 2.0, 1.0)])
    assert fast.ratios_to(slow) == [2.0, 2.0, 2.0]


def test_fewer_than_three_rounds_is_refused():
    with pytest.raises(ValueError, match="rounds: 2 is fewer than 3"):
        interleave({"A": ScriptedDecode("A", [1.0] * 3, [])}, 2)


def test_engine_rounds_are_timed_by_the_device_clock(monkeypatch):
    """The engine runner reads `engine.timing.start_clock` (a synchronised CUDA event
    pair on GPU), not a clock of its own."""
    started = []

    def fake_clock(device):
        started.append(device)
        return lambda: 250.0  # ms

    monkeypatch.setattr(rounds, "start_clock", fake_clock)
    target = tiny_target()
    pair = ModelPair(target, MirrorDraft(target), CharTokenizer(), target_id="t", draft_id="d", dtype="float32", chat_template=False)
    settings = PolicySettings.single(CostModel.linear(1.0, 5.0), shape=TreeShape(3, 3, 8),
                                     thresholds=Thresholds(0.2, 0.2, 0.2))
    runner = rounds.EngineRunner(pair.engine(table.make_policy("vanilla", settings), 2, 64), ["ab", "cd"],
                                 rounds.sampling(2, 0.0, 5))
    done = runner.run()
    assert started == [torch.device("cpu")] and done.seconds == 0.25 and done.tokens == 10


def test_bench_interleaves_the_methods_of_each_batch_size(monkeypatch):
    calls: list[tuple[str, int]] = []
    real = table.runner_for

    class Logged:
        def __init__(self, runner, label, batch_size):
            self.runner, self.label, self.batch_size = runner, label, batch_size

        def warm_up(self):
            calls.append((f"{self.label} warm-up", self.batch_size))
            self.runner.warm_up()

        def run(self):
            calls.append((self.label, self.batch_size))
            return self.runner.run()

    def logged(pair, method, settings, best, prompts, batch_size, *args):
        runner, shape, note = real(pair, method, settings, best, prompts, batch_size, *args)
        return Logged(runner, method.label, batch_size), shape, note

    monkeypatch.setattr(table, "runner_for", logged)
    target = tiny_target()
    pair = ModelPair(target, MirrorDraft(target), CharTokenizer(), target_id="t", draft_id="d", dtype="float32", chat_template=False)
    settings = PolicySettings.single(CostModel.linear(1.0, 5.0), shape=TreeShape(3, 3, 8),
                                     thresholds=Thresholds(0.2, 0.2, 0.2))
    chosen = [methodkit.Method.parse(m) for m in ("vanilla", "eagle2")]
    records = table.bench(pair, chosen, settings, {}, ["ab", "cd"], [1, 2], [0.0], 4, 64, rounds=3)
    expected = []
    for b in (1, 2):
        expected += [("vanilla warm-up", b), ("eagle2 warm-up", b)] + [("vanilla", b), ("eagle2", b),
                                                                      ("eagle2", b), ("vanilla", b),
                                                                      ("vanilla", b), ("eagle2", b)]
    assert calls == expected
    assert all(len(r.tokens_per_s_rounds) == 3 for r in records)


def test_resolution_ratios_split_the_rounds_by_order():
    from tools.bench_resolution import ratios

    split = ratios([110.0, 90.0, 110.0, 90.0], [100.0] * 4)
    assert split["rounds"] == [1.1, 0.9, 1.1, 0.9]
    assert (split["median_even_rounds"], split["median_odd_rounds"]) == (1.1, 0.9)  # a bias by position shows
    assert split["median"] == pytest.approx(1.0)


def test_resolution_needs_an_even_number_of_rounds(capsys):
    from tools.bench_resolution import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--profile", "p.yaml", "--json", "x.json", "--rounds", "5"])
    assert "--rounds must be even" in capsys.readouterr().err


def test_host_time_is_the_step_outside_the_draft_and_verify_clocks():
    from sglang_cast.engine import IterationRecord
    from tools.benchkit.rounds import summarise

    def record(step_ms: float) -> IterationRecord:
        plan = make_policy("eagle2", PolicySettings.single(CostModel.linear(1.0, 0.0))).begin(1, 10)
        return IterationRecord(plan=plan, batch_size=1, context_len=10, depth=2, verified=3, accepted=[1],
                               verified_value=[1.0], draft_ms=3.0, verify_ms=10.0, step_ms=step_ms)

    stats = summarise(Round([[1, 2]], 1.0, [record(14.0), record(14.5)]))
    assert stats["host_ms"] == pytest.approx(1.25)
    assert stats["step_ms"] == pytest.approx(14.25) and stats["charged_step_ms"] is None  # no plans: no charge
    charged = summarise(Round([[1, 2]], 1.0, [record(14.0), record(14.5)], charged_ms=[13.0, 15.0]))
    assert charged["charged_step_ms"] == pytest.approx(14.0)
