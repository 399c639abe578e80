"""engine/timing.StageClock: an iteration's stages timed with one device wait in all
(the H200 run showed every stage clock synchronising the device twice). The CUDA branch
is checked with a stand-in event class; the engine's iteration runs on the CPU branch."""

import time

import pytest
import torch

from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, TreeShape, make_policy
from sglang_cast.engine import Engine, StepLog
from sglang_cast.engine.timing import StageClock
from tools.tiny_models import CharTokenizer, random_pair


class FakeEvent:
    """A CUDA event on a fake timeline: ``record`` stamps the next tick."""

    clock = 0.0
    synchronized: list = []

    def __init__(self, enable_timing: bool) -> None:
        assert enable_timing
        self.at = None

    def record(self) -> None:
        FakeEvent.clock += 1.5
        self.at = FakeEvent.clock

    def synchronize(self) -> None:
        FakeEvent.synchronized.append(self)

    def elapsed_time(self, end: "FakeEvent") -> float:
        return end.at - self.at


def test_on_a_gpu_marks_are_events_and_only_the_last_is_waited_for(monkeypatch):
    FakeEvent.clock, FakeEvent.synchronized = 0.0, []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)

    def no_device_wide_wait(*args):
        raise AssertionError("a stage clock must not synchronise the whole device")

    monkeypatch.setattr(torch.cuda, "synchronize", no_device_wide_wait)
    clock = StageClock(torch.device("cuda"))
    for _ in range(4):
        clock.mark()
    assert clock.read() == [1.5] * 4
    assert FakeEvent.synchronized == [clock.marks[-1]]


def test_on_the_cpu_stages_are_consecutive_wall_clock_intervals():
    clock = StageClock(torch.device("cpu"))
    time.sleep(0.01)
    clock.mark()
    clock.mark()
    stages = clock.read()
    assert len(stages) == 2 and stages[0] >= 10.0 and 0.0 <= stages[1] < stages[0]


@pytest.mark.parametrize("policy", ["vanilla", "cast"])
def test_an_iterations_record_splits_its_step_into_the_marked_stages(policy):
    target, draft = random_pair("cpu", torch.float32)
    settings = PolicySettings.single(CostModel.linear(1.0, 4.0, draft_ratio=0.2), shape=TreeShape(3, 3, 8))
    engine = Engine(target, CharTokenizer(), draft if policy != "vanilla" else None, make_policy(policy, settings),
                    max_batch_size=2, context_length=96)
    log = StepLog()
    engine.generate(["hello world", "trees"], SamplingParams(max_new_tokens=8), on_step=log)
    assert log.records
    for record in log.records:
        assert record.draft_ms > 0 and record.verify_ms > 0
        # set-up and the appending of tokens are the step's other two stages
        assert record.step_ms > record.draft_ms + record.verify_ms
