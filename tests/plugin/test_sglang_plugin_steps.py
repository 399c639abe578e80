"""The SGLang plugin's whole-iteration timing (issue 33 item 4), on CPU.

SGLang's iterations only run on CUDA, so the rules are re-stated with stand-ins:
a planted clock for the synchronised one, and a stand-in ``sglang.Engine`` that
runs the CAST worker's decisions (the plugin's own decider, drafting and step
log) on a synthetic draft model and advances the clock by what the iteration's
forwards cost plus planted host terms.  What the real worker adds — the call
hook around SGLang's ``forward_batch_generation`` — is tested against SGLang's
own class where SGLang imports (.venv-sglang).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from sglang_cast.cast import CostModel, OverheadTable, PolicySettings, TreeShape, charge, make_policy
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.plugin_config import PROFILE_ENV, ParallelLayout, SGLangSection, StaticShape
from sglang_cast.sglang_plugin.profile_forwards import SGLangProfileLaunch
from sglang_cast.sglang_plugin.profile_steps import SGLangStepTimer, StepRun
from sglang_cast.sglang_plugin.runtime_shapes import NO_DRAFT
from sglang_cast.sglang_plugin.step_log import STEP_PROFILE_ENV, LoggedStep, StepLog, StepProfileMode, read_steps
from support.synthetic import PathModel
from support.plugin import PLANTED, PlantedClock, StandInFactory, forward_tables, shape_flags, worker_iteration

def launch(tp_size: int = 1) -> SGLangProfileLaunch:
    return SGLangProfileLaunch("target", "draft", "bfloat16", context_length=512, max_batch_size=2, topk=4, max_n=8,
                               tp_size=tp_size)


# ------------------------------------------------------------- the step log
def plain_plan(batch: int = 1, context: int = 20):
    return make_policy("vanilla", PolicySettings.single(forward_tables())).begin(batch, context)


def test_an_iteration_is_timed_from_its_call_to_the_next_and_an_interval_ending_in_a_prefill_is_dropped(tmp_path):
    clock, path = PlantedClock(), tmp_path / "steps.jsonl"
    log = StepLog(path, torch.device("cpu"), clock)
    log.arrive(True)
    log.ran(plain_plan(), 0, 0, torch.tensor([1]))
    clock.now += 12.5
    log.arrive(True)  # ends the first: 12.5 ms
    log.ran(plain_plan(), 0, 0, torch.tensor([1]))
    clock.now += 40.0
    log.arrive(False)  # a prefill: the open iteration's interval holds it, so it is dropped
    clock.now += 30.0
    log.arrive(True)  # opened, but nothing ran (an idle batch): not logged
    clock.now += 1.0
    log.arrive(True)
    steps, offset = read_steps(path)
    assert [s.step_ms for s in steps] == [12.5]
    assert offset == path.stat().st_size
    with path.open("a") as out:
        out.write('{"batch_size": 1')  # a line still being written
    assert read_steps(path, offset) == ([], offset)


def test_a_logged_step_is_charged_its_plans_forwards_without_the_profiles_host_work(tmp_path):
    terms = torch.tensor([[[5.0, 7.0, 3.0, 2.0]], [[5.0, 7.0, 3.0, 2.0]]], dtype=torch.float64)
    settings = PolicySettings.single(
        CostModel(forward_tables().target, forward_tables().draft, OverheadTable(32, 1, (1, 2), terms)),
        TreeShape(2, 2, 5))
    decider = CastDecider(make_policy("eagle2", settings), StaticShape(2, 2, 5))
    plan, drafted, _, _, _ = worker_iteration(decider, PathModel(vocab=12, seed=1), torch.tensor([3, 4]), 20, 2, 2)
    clock, path = PlantedClock(), tmp_path / "steps.jsonl"
    log = StepLog(path, torch.device("cpu"), clock)
    log.arrive(True)
    log.ran(plan, len(plan.kept), 4, torch.tensor([3, 1]))
    clock.now += 100.0
    log.arrive(True)
    (step,), _ = read_steps(path)
    forwards = forward_tables().draft(2, 20, 3) + plan.draft_forward_ms + forward_tables().target(2, 20, 5)
    assert step == LoggedStep(2, 20, 2, 4, 4, 100.0, pytest.approx(forwards))
    assert step.forward_ms < sum(charge(plan, 4, 2, 2))  # the host terms are the fit's to find, not charged


def test_the_verify_forward_is_timed_on_its_own_and_set_against_its_target_charge(tmp_path):
    clock, path = PlantedClock(), tmp_path / "steps.jsonl"
    log = StepLog(path, torch.device("cpu"), clock)
    calls = []

    def forward(batch=None, forward_batch=None, is_verify=False):  # the target worker's, planted
        calls.append(is_verify)
        clock.now += 6.0 if is_verify else 50.0
        return "output"

    timed = log.timed_verify(forward)
    assert timed(object()) == "output"  # a prefill before any decode: untimed, passed through
    log.arrive(True)
    clock.now += 1.0  # the worker's own host work
    assert timed(batch=None, forward_batch=object(), is_verify=True) == "output"
    timed(object())  # any other target call inside the iteration is not the verify
    log.ran(plain_plan(), 0, 0, torch.tensor([1]))
    clock.now += 2.0
    log.arrive(True)
    (step,), _ = read_steps(path)
    assert calls == [False, True, False]
    assert (step.step_ms, step.verify_ms) == (59.0, 6.0)
    assert step.verify_charge_ms == pytest.approx(forward_tables().target(1, 20, 1))  # f_T(B, c, 1)
    assert step.speed() == pytest.approx(6.0 / forward_tables().target(1, 20, 1))
    log.ran(plain_plan(), 0, 0, torch.tensor([1]))  # an iteration whose verify was not timed
    log.arrive(True)
    (_, untimed), _ = read_steps(path)
    assert (untimed.verify_ms, untimed.verify_charge_ms, untimed.speed()) == (None, None, None)


def test_the_step_mode_comes_from_one_variable_and_names_what_is_wrong():
    assert StepProfileMode.from_env({}) is None
    mode = StepProfileMode("/tmp/log.jsonl", "eagle2")
    assert StepProfileMode.from_env({STEP_PROFILE_ENV: mode.to_env()}) == mode
    for raw, words in (("{", "not JSON"), ('{"log": "x", "depth": 3}', "'log' and optional 'policy'"),
                       ('{"log": ""}', ".log"), ('{"log": "x", "policy": "greedy"}', ".policy")):
        with pytest.raises(ValueError, match=STEP_PROFILE_ENV) as err:
            StepProfileMode.from_env({STEP_PROFILE_ENV: raw})
        assert words in str(err.value)


# ------------------------------------------------------------ the design runs
def test_a_tree_run_serves_exactly_its_tree_and_the_plain_run_never_drafts(tmp_path):
    tree, chain, plain = StepRun(TreeShape(4, 2, 8)), StepRun(TreeShape(1, 3, 4)), StepRun(None)
    for run, steps, topk, tokens in ((tree, 2, 4, 8), (chain, 3, 2, 4), (plain, 1, 2, 2)):
        argv = run.argv(launch())
        assert shape_flags(argv) == StaticShape(steps, topk, tokens)
        shape_flags(argv).check()  # what CAST's server-argument check accepts (top-k >= 2)
        assert argv[argv.index("--cuda-graph-backend-decode") + 1] == "disabled"  # eager, as the forwards
    tree_profile, plain_profile = (r.profile(forward_tables(), launch(tp_size=2)) for r in (tree, plain))
    assert SGLangSection.of(tree_profile).runtime_states == ((2, 8),)
    assert SGLangSection.of(tree_profile).parallel == ParallelLayout(2, 1)
    assert tree.mode(tmp_path / "l").policy == "eagle2" and plain.mode(tmp_path / "l").policy is None
    decider = CastDecider(make_policy("cast", plain_profile.settings), StaticShape(1, 1, 2))
    assert NO_DRAFT in decider.states and not decider.drafts(1) and not decider.drafts(64)


def test_the_timer_runs_one_engine_per_tree_for_every_batch_and_keeps_the_designs_steps(tmp_path):
    factory = StandInFactory()
    timer = SGLangStepTimer(launch(), forward_tables(), tmp_path, engine_factory=factory)
    before = {name: os.environ.get(name) for name in (PROFILE_ENV, STEP_PROFILE_ENV)}
    chain, tree = TreeShape(1, 3, 4), TreeShape(4, 2, 8)
    runs = {}
    for shape in (None, chain, tree):
        for batch in (1, 2):
            runs[shape, batch] = timer.time(shape, ["p" * 20] * batch, 60, warmup=2, steps=5)
    timer.close()
    assert len(factory.engines) == 3 and all(e.shut for e in factory.engines)  # one per run, each shut down
    assert {name: os.environ.get(name) for name in before} == before
    for (shape, batch), steps in runs.items():
        assert len(steps) == 5 and all(s.batch_size == batch for s in steps)
        depth, verified = (0, 0) if shape is None else (shape.max_depth, shape.num_verify_tokens - 1)
        assert all((s.depth, s.verified) == (depth, verified) for s in steps)
        assert all(s.context_len > 20 for s in steps)  # decode iterations only: the prefill is not one
        residuals = [s.step_ms - s.forward_ms for s in steps]
        assert residuals == pytest.approx([PLANTED.iteration_ms(depth, verified)] * 5)
    engine = factory.engines[1]
    assert load_profile(Path(engine.mode.log).with_suffix(".yaml")).profile.settings.buckets[0].shape == chain
    assert json.loads(Path(engine.mode.log).read_text().splitlines()[0])["depth"] == 3


# --------------------------------------------- the hook inside SGLang's worker
@pytest.mark.requires_sglang("sglang.srt.speculative.eagle_worker_v2", "sglang.srt.model_executor.forward_batch_info",
                              "sglang_cast.sglang_plugin.worker")
def test_the_workers_hook_logs_decode_calls_and_passes_every_call_through(tmp_path, monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    from sglang_cast.sglang_plugin.worker import CastWorker
    settings = PolicySettings.single(forward_tables(), TreeShape(2, 2, 5))
    clock = PlantedClock()
    worker = object.__new__(CastWorker)  # the hook's state only: SGLang's __init__ needs a GPU
    worker.decider = CastDecider(make_policy("eagle2", settings), StaticShape(2, 2, 5))
    worker.step_log = StepLog(tmp_path / "steps.jsonl", torch.device("cpu"), clock)
    plan = worker.decider.begin(2, 30)
    calls = []

    def iteration(self, batch, *args, **kwargs):  # SGLang's forward_batch_generation, planted
        calls.append(batch.forward_mode)
        if batch.forward_mode == ForwardMode.DECODE and batch.draft:
            self.drafted = (plan, 2, 4)
        clock.now += 10.0
        return SimpleNamespace(accept_lens=torch.tensor([2, 3]))

    monkeypatch.setattr(EAGLEWorkerV2, "forward_batch_generation", iteration)

    def batch(mode, draft=True):
        return SimpleNamespace(forward_mode=mode, is_extend_in_batch=False, seq_lens_cpu=torch.tensor([30, 25]),
                               seq_lens=None, draft=draft)

    for mode, draft in ((ForwardMode.EXTEND, True), (ForwardMode.DECODE, True), (ForwardMode.DECODE, False),
                        (ForwardMode.DECODE, True), (ForwardMode.EXTEND, True), (ForwardMode.DECODE, True)):
        assert worker.forward_batch_generation(batch(mode, draft)).accept_lens.tolist() == [2, 3]
    steps, _ = read_steps(tmp_path / "steps.jsonl")
    # The first decode drafted (depth 2, 4 verified), the second ran the zero-step state; the
    # third's interval ends in a prefill and the last is still open.
    assert [(s.batch_size, s.context_len, s.depth, s.verified, s.tokens) for s in steps] == [
        (2, 30, 2, 4, 5), (2, 30, 0, 0, 5)]
    assert [s.step_ms for s in steps] == [10.0, 10.0]
    worker.step_log = None
    worker.forward_batch_generation(batch(ForwardMode.DECODE))
    assert len(calls) == 7 and len(read_steps(tmp_path / "steps.jsonl")[0]) == 2
