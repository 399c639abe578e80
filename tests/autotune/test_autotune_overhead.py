"""Measuring the host overhead (autotune/overhead.py) and fitting it from the store
(autotune/costs.py): the step design, the forwards a step is charged, whole steps
timed on the tiny engine, resumable runs, and the fitted table in the cost model."""

from dataclasses import replace

import pytest
import torch

from autotune.costs import measured_costs
from autotune.grid import ProfileGrid
from autotune.overhead import PLAIN, PROFILE, NativeStepTimer, StepDesign, run_step_profile, shape_key, step_charge_ms
from autotune.store import Store, TimedStep
from sglang_cast.cast import CostModel, PolicySettings, TreeShape, charge, charged_ms, grow_tree, make_policy
from support.autotune import GRID, SETUP, ChainDraft, chain_costs, fill, tiny_pair, tiny_prompts
from support.costs import overhead


def test_the_step_design_varies_depth_apart_from_the_verified_count_inside_the_grid():
    grid = ProfileGrid.quick()
    design = StepDesign.for_grid(grid)
    depths = sorted({s.max_depth for s in design.shapes})
    assert depths == list(range(1, 7))
    for depth in depths:  # two verify sizes per depth: per_layer and per_token are separable
        assert len({min(s.pool_size, s.num_verify_tokens - 1) for s in design.shapes if s.max_depth == depth}) == 2
    assert all(s.top_k <= grid.draft_max_n and s.max_depth + 1 <= grid.draft_max_n
               and s.num_verify_tokens <= grid.max_n for s in design.shapes)
    assert design.runs()[0] is None and shape_key(None) == PLAIN


@pytest.mark.parametrize("policy", ["eagle2", "cast", "goodput"])
def test_a_step_charged_with_host_work_is_measured_against_its_forwards_alone(policy):
    host = overhead(plain=3.0, spec_base=5.0, per_layer=2.0, per_token=0.5)
    base = chain_costs()
    shape = TreeShape(3, 4, 10)
    with_host = make_policy(policy, PolicySettings.single(CostModel(base.target, base.draft, host), shape=shape))
    plan = with_host.begin(1, 50)
    tree = grow_tree(plan, ChainDraft(), torch.tensor([5]))
    verified = plan.verify_count(tree)
    depth = len(plan.kept)
    # The forwards of that step: a draft forward per layer after the first, the draft's
    # catch-up on 1 accepted token + bonus, the verify of the root and the verified nodes.
    forwards = (sum(base.draft(1, plan.layer_context(layer), plan.kept[layer - 1]) for layer in range(1, depth))
                + base.draft(1, 50, 2) + base.target(1, 50, verified + 1))
    assert depth > 1 and sum(charge(plan, verified, depth, 1)) > forwards + 5.0  # the plan charges host work
    assert charged_ms(plan, verified, 1)[1] == pytest.approx(forwards)
    # A stored step (no plan) is charged the same: its forwards plus the host terms.
    step = TimedStep(1, 50, depth, verified, 2, 0.0, charged_ms(plan, verified, 1)[1])
    assert step_charge_ms(step, plan.settings.costs) == pytest.approx(charged_ms(plan, verified, 1)[0])
    plain = make_policy("vanilla", PolicySettings.single(CostModel(base.target, base.draft, host))).begin(1, 50)
    assert charged_ms(plain, 0, 0)[1] == pytest.approx(base.target(1, 50, 1))
    plain_step = TimedStep(1, 50, 0, 0, 1, 0.0, charged_ms(plain, 0, 0)[1])
    assert step_charge_ms(plain_step, plain.settings.costs) == pytest.approx(charged_ms(plain, 0, 0)[0])


def test_profile_times_plain_and_every_shape_at_every_batch_size_and_resumes(tmp_path):
    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    design = StepDesign((TreeShape(1, 2, 3), TreeShape(3, 1, 4)), warmup=1, steps=3)
    forwards = measured_costs(store, SETUP, overhead=False).costs
    prompts = tiny_prompts().head(1)  # fewer prompts than B=2: they are cycled
    report = run_step_profile(NativeStepTimer(pair, forwards), store, SETUP, GRID, design, prompts, progress=False)
    keys = {PLAIN, "k1-d2-m3", "k3-d1-m4"}
    assert (report.runs, report.skipped, report.steps) == (6, 0, 18)
    assert store.step_cells(SETUP, PROFILE) == {(b, k) for b in GRID.batch_sizes for k in keys}
    by_shape = {}
    for record in store.step_records(SETUP, PROFILE):
        by_shape.setdefault((record.batch_size, record.shape), []).append(record.timed())
    for (batch, key), steps in by_shape.items():
        assert len(steps) == design.steps and all(s.batch_size == batch for s in steps)  # no prefill step timed
        depth, verified = {PLAIN: (0, 0), "k1-d2-m3": (2, 2), "k3-d1-m4": (1, 3)}[key]
        assert all((s.depth, s.verified) == (depth, verified) and s.step_ms > 0 for s in steps)
        if key == PLAIN:
            assert all(s.forward_ms == pytest.approx(forwards.target(batch, s.context_len, 1)) for s in steps)
    again = run_step_profile(NativeStepTimer(pair, forwards), store, SETUP, GRID, design, prompts, progress=False)
    assert (again.runs, again.skipped) == (0, 6)


def test_tune_costs_carry_the_overhead_fitted_from_stored_steps(tmp_path):
    store = fill(Store(tmp_path / "a.db"))
    assert measured_costs(store, SETUP).costs.overhead is None
    assert "not measured" in measured_costs(store, SETUP).provenance()["overhead"]
    planted = {"plain": 2.0, "spec_base": 4.0, "per_layer": 1.5, "per_token": 0.25}
    steps = []
    for batch in GRID.batch_sizes:
        for depth, verified in ((0, 0), (1, 1), (1, 3), (2, 2), (2, 6), (3, 3), (3, 8)):
            host = planted["plain"] if depth == 0 else (planted["spec_base"] + planted["per_layer"] * (depth - 1)
                                                       + planted["per_token"] * verified)
            steps.append(TimedStep(batch, 40, depth, verified, 1, 10.0 + host, 10.0))
    store.add_steps(SETUP, PROFILE, "planted", steps, 0.0)
    measured = measured_costs(store, SETUP)
    table = measured.costs.overhead
    assert table.batch_sizes == measured.costs.target.batch_sizes and table.bucket == GRID.ctx_bucket
    for batch in GRID.batch_sizes:
        terms = table.terms(batch, 40)
        assert [terms.plain, terms.spec_base, terms.per_layer, terms.per_token] == pytest.approx(
            list(planted.values()), abs=1e-9)
    assert measured.steps == {PROFILE: len(steps)} and measured.provenance()["overhead"]["steps"] == {PROFILE: 14}
    assert measured_costs(store, SETUP, overhead=False).costs.overhead is None


def test_a_run_on_a_machine_slower_than_its_tables_is_stored_at_the_tables_speed(tmp_path, monkeypatch):
    """The reference forward timed around a design run says how much slower the machine
    ran than when its forward tables were profiled; the run's steps are stored divided by
    that factor, so the drift between the two measurements does not become host work."""
    import autotune.overhead as overhead

    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    forwards = measured_costs(store, SETUP, overhead=False).costs
    step = TimedStep(1, 20, 0, 0, 1, step_ms=30.0, forward_ms=12.0)
    references = iter([2.0, 8.0])  # ms of the reference forward before and after the run: geometric mean 4
    monkeypatch.setattr(overhead, "run_steps", lambda *args: [step])
    monkeypatch.setattr(overhead, "reference_ms", lambda pair, batch, context: next(references))
    monkeypatch.setattr(type(forwards.target), "__call__", lambda table, b, c, n: 2.0)  # the table's f_T(B, c, 1)
    (stored,) = NativeStepTimer(pair, forwards).time(1, None, ["hello"], 4, StepDesign((), warmup=0, steps=1))
    assert stored == TimedStep(1, 20, 0, 0, 1, step_ms=15.0, forward_ms=12.0)  # 2x slower: half the ms
    assert overhead.speed_factor(2.0, 8.0, 2.0) == 2.0


def test_the_reference_forward_is_compared_with_its_own_buckets_row():
    """A run at context c is referenced at its bucket's profiled context (the boundary it
    is charged at) and compared with that bucket's row, not the next one's."""
    from autotune.overhead import reference_point
    from sglang_cast.cast import CostTable

    rows = torch.tensor([[[10.0, 11.0], [20.0, 21.0]]], dtype=torch.float64)  # [B=1][bucket 128, 256][n = 1, 2]
    table = CostTable(128, 2, (1,), rows)
    assert reference_point(table, 1, 56) == (128, pytest.approx(10.0))
    assert reference_point(table, 1, 127) == (128, pytest.approx(10.0))
    assert reference_point(table, 1, 128) == (256, pytest.approx(20.0)) == reference_point(table, 1, 900)


class PlantedTimer:
    """A `StepTimer` that hands out planted runs in order: step times in ms per run."""

    def __init__(self, runs: list[list[float]]) -> None:
        self.runs, self.calls = iter(runs), 0

    def time(self, batch_size, shape, texts, new_tokens, design):
        self.calls += 1
        return [TimedStep(batch_size, 20, 0, 0, batch_size, ms, 10.0) for ms in next(self.runs)]


def stored_ms(store):
    return sorted(r.timed().step_ms for r in store.step_records(SETUP, PROFILE))


def test_a_run_with_a_stall_inside_it_is_timed_again_and_the_steady_attempt_stored(tmp_path):
    from autotune.overhead import UNSTEADY_RATIO

    store = Store(tmp_path / "a.db")
    grid = replace(GRID, batch_sizes=(1,))
    stalled, steady = [25.0, 540.0, 120.0, 26.0], [25.0, 26.0, 27.0, 25.5]
    assert max(stalled) / min(stalled) > UNSTEADY_RATIO >= max(steady) / min(steady)
    timer = PlantedTimer([stalled, steady])
    report = run_step_profile(timer, store, SETUP, grid, StepDesign(()), tiny_prompts().head(1), progress=False)
    assert timer.calls == 2 and (report.retimed, report.unsteady) == (1, 0)
    assert stored_ms(store) == sorted(steady)
    assert report.stalls().startswith("runs with a stall, timed again: 1;")


def test_a_run_that_stalls_every_time_is_stored_once_at_its_steadiest_and_reported(tmp_path):
    from autotune.overhead import RETIMES

    store = Store(tmp_path / "a.db")
    grid = replace(GRID, batch_sizes=(1,))
    attempts = [[25.0, 500.0], [25.0, 80.0], [25.0, 300.0], [25.0, 26.0]]  # the last would be steady: never asked for
    timer = PlantedTimer(attempts)
    report = run_step_profile(timer, store, SETUP, grid, StepDesign(()), tiny_prompts().head(1), progress=False)
    assert timer.calls == 1 + RETIMES == 3
    assert (report.retimed, report.unsteady) == (1, 1) and stored_ms(store) == [25.0, 80.0]
    quiet = run_step_profile(PlantedTimer([[25.0, 26.0]]), Store(tmp_path / "b.db"), SETUP, grid, StepDesign(()),
                             tiny_prompts().head(1), progress=False)
    assert quiet.stalls() == ""


def test_profile_times_the_design_again_once_the_forward_tables_changed(tmp_path, capsys):
    """`profile` drops steps charged against forwards it has since re-measured, so their
    runs are timed again instead of skipped (autotune/commands/profile.py)."""
    from types import SimpleNamespace

    from autotune.commands.profile import measure_overhead
    from sglang_cast.engine.timing import Timing

    store, pair = fill(Store(tmp_path / "a.db")), tiny_pair()
    design = StepDesign((TreeShape(1, 2, 3),), warmup=1, steps=2)
    options = SimpleNamespace(dataset=None, quiet=True)
    timer = NativeStepTimer(pair, measured_costs(store, SETUP, overhead=False).costs)
    measure_overhead(options, store, SETUP, GRID, design, timer)
    assert "0 runs already stored" in capsys.readouterr().out
    measure_overhead(options, store, SETUP, GRID, design, timer)
    assert f"{2 * len(GRID.batch_sizes)} runs already stored" in capsys.readouterr().out
    store.add_measurement(SETUP, "target", 1, GRID.ctx_bucket, 1, Timing(2.0, 2.0, 2.0, 1), 0.1)  # re-measured
    measure_overhead(options, store, SETUP, GRID, design, timer)
    out = capsys.readouterr().out
    assert f"dropped {2 * 2 * len(GRID.batch_sizes)} profile steps stored before the forward tables" in out
    assert "0 runs already stored" in out and len(store.step_records(SETUP, PROFILE)) == 2 * 2 * len(GRID.batch_sizes)
