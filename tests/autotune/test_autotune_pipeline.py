"""profile → collect → tune → publish on tiny random models (fast): resumable
profiling, traces keyed by prompt, and a published profile that validates and
carries its provenance and live-confirmation numbers."""

from dataclasses import replace

import sqlite3

import pytest

from autotune import cli, report
from autotune.commands import profile as profile_command
from autotune.bench import BenchConfig, run_bench
from autotune.costs import measured_costs
from autotune.errors import AutotuneError
from autotune.grid import ProfileGrid
from autotune.profiler import GridJob, forward_timer, profile_grids, run_profile
from autotune.space import Grid, SearchSpace
from autotune.store import Setup, Store
from autotune.tuner import BucketResult
from autotune.workflow import TuneConfig, larger_batches_note, tune_and_publish
from sglang_cast import hardware
from sglang_cast.cast import BucketSettings, TreeShape
from sglang_cast.engine.timing import Timing
from sglang_cast.profile import load_profile
from support import ROOT
from support.autotune import GRID, SETUP, SPACE, fill, tiny_pair, tiny_prompts

def test_profile_resumes_after_an_interruption(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    points = len(GRID.points())
    rows = iter(range(10**6))
    first = run_profile(pair, store, SETUP, GRID, progress=False, should_stop=lambda: next(rows) >= 1)
    row = len(GRID.n_values("target"))  # the first row: target, B=1, every n
    assert (first.measured, first.skipped) == (row, 0)
    with pytest.raises(AutotuneError, match="no draft measurements"):
        measured_costs(store, SETUP)  # the interrupted run stopped inside the target grid
    second = run_profile(pair, store, SETUP, GRID, progress=False)
    assert (second.measured, second.skipped) == (points - row, row)
    assert run_profile(pair, store, SETUP, GRID, progress=False).measured == 0
    costs = measured_costs(store, SETUP)
    assert costs.costs.target.batch_sizes == (1, 2) and costs.costs.target.max_tokens == GRID.max_n
    assert costs.target.timed_n == (1, 2, 4, 8) and costs.draft.timed_n == (1, 2, 4)


def test_formats_time_each_shared_forward_once(tmp_path, monkeypatch, capsys):
    """`profile --weight-format int8+int8,int4+int8,int4`: a draft forward reads none of
    the target's weights and a target forward none of the draft's, so the second format
    takes the first one's draft rows and the third the second's target rows (copied, not
    timed again minutes later); each format times only what no earlier one has; a rerun
    copies nothing."""
    timers = []  # (format, role) of every timer made

    def spy_timers(pair):
        def make(role, max_batch, capacity):
            timers.append((pair.target_id.partition("@")[2], role))
            return forward_timer(pair, role, max_batch, capacity)
        return make

    monkeypatch.setattr(profile_command, "load_pair",
                        lambda options, device, fmt: replace(tiny_pair(), target_id=f"tiny-target@{fmt}"))
    monkeypatch.setattr(profile_command, "native_timers", spy_timers)
    monkeypatch.setattr(profile_command, "checked_label", lambda options, device: options.label)
    db = tmp_path / "a.db"
    argv = ["profile", "--gpu", "cpu", "--weight-format", "int8+int8,int4+int8,int4", "--batch-sizes", "1,2",
            "--ctx-bucket", "32", "--ctx-buckets", "1", "--max-n", "4", "--draft-max-n", "2", "--repeats", "1",
            "--overhead-steps", "0", "--quiet", "--db", str(db)]
    timed = [("int8+int8", "target"), ("int4+int8", "target"), ("int8+int8", "draft"), ("int4", "draft")]
    assert cli.main(argv) == 0 and timers == timed
    out = capsys.readouterr().out
    assert "draft: the rows timed with weight format int8+int8 (the same draft head format; 4 copied" in out
    assert "target: the rows timed with weight format int4+int8 (the same target part; 8 copied" in out

    def rows(fmt: str, role: str) -> dict:
        setup = Setup.current(hardware.device_name("cpu"), f"tiny-target@{fmt}", "mirror-draft", "float32")
        return {(m.batch_size, m.context_len, m.n): (m.median_ms, m.created)
                for m in Store(db).measurements(setup) if m.role == role}

    assert len(rows("int8+int8", "draft")) == 4 and rows("int4+int8", "draft") == rows("int8+int8", "draft")
    assert len(rows("int4", "target")) == 8 and rows("int4", "target") == rows("int4+int8", "target")
    assert rows("int4", "draft").keys() == rows("int8+int8", "draft").keys()  # timed on its own: not the same rows
    assert rows("int4", "draft") != rows("int8+int8", "draft")
    assert rows("int8+int8", "target") != rows("int4+int8", "target")
    timers.clear()
    assert cli.main(argv) == 0 and timers == []
    assert "(the same draft head format; 0 copied" in capsys.readouterr().out
    # --max-age 0 re-times everything, and still the shared rows are copied.
    assert cli.main([*argv, "--max-age", "0"]) == 0 and timers == timed
    out = capsys.readouterr().out
    assert "4 copied" in out and "8 copied" in out and rows("int4+int8", "draft") == rows("int8+int8", "draft")


def test_formats_are_timed_together_so_drift_cannot_rank_them(tmp_path):
    """Two setups whose forwards cost the same, on a machine slowing down 4x over the
    run: their rows are timed round by round together, so every point of the two
    tables agrees within the drift of one round, where timing one setup after the
    other would make the second look up to 4x slower."""
    calls = []  # (setup index, role, B, c, n) of every timed forward, in order

    class DriftingTimer:
        def __init__(self, index, role):
            self.index, self.role = index, role

        def time(self, batch_size, context_len, n, warmup, repeats):
            calls.append((self.index, self.role, batch_size, context_len, n))
            ms = (1.0 + batch_size + n) * (1.0 + 3.0 * len(calls) / 148)  # 4x slower at the run's end
            return Timing(ms, ms, ms, repeats)

    def timers(index):
        return lambda role, max_batch, capacity: DriftingTimer(index, role)

    store = Store(tmp_path / "a.db")
    setups = [SETUP, replace(SETUP, target_model="tiny-target@other")]
    grid = replace(GRID, warmup=1, repeats=3)
    reports = profile_grids([GridJob(timers(i), setup) for i, setup in enumerate(setups)], store, grid,
                            progress=False)
    assert [r.measured for r in reports] == [len(grid.points())] * 2
    # 2 setups x 4 rounds x (14 points + an untimed re-warm per row), and each timer's untimed first call
    assert len(calls) == 2 * 4 * (14 + 4) + 4
    tables = [{(m.role, m.batch_size, m.n): m.median_ms for m in store.measurements(setup)} for setup in setups]
    assert tables[0].keys() == tables[1].keys()
    ratios = [tables[1][key] / tables[0][key] for key in tables[0]]
    assert max(ratios) < 1.1 and min(ratios) > 0.9
    # Inside a row, the order of the setups rotates from round to round.
    row = [c[0] for c in calls if c[1:4] == ("target", 1, grid.contexts[0])][2:]  # after the untimed first calls
    per_setup = len(grid.n_values("target")) + 1  # its points after an untimed re-warm
    assert row[:2 * per_setup] == [0] * per_setup + [1] * per_setup
    assert row[2 * per_setup:4 * per_setup] == [1] * per_setup + [0] * per_setup


def test_an_incomplete_batch_size_is_left_out_and_named(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    run_profile(pair, store, SETUP, GRID, progress=False)
    partial = ProfileGrid(batch_sizes=(4,), ctx_bucket=32, ctx_buckets=1, max_n=2, draft_max_n=2, n_mode=(1, 2),
                          warmup=0, repeats=1)
    run_profile(pair, store, SETUP, partial, progress=False)  # B=4 timed only up to n=2 of 8
    costs = measured_costs(store, SETUP)
    assert costs.costs.target.batch_sizes == (1, 2) and costs.target.left_out == (4,)
    assert costs.provenance()["target"]["incomplete_batch_sizes_left_out"] == [4]


def test_collect_tune_and_publish(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store)
    stored = store.traces("tiny-target", "mirror-draft")
    assert stored and {s.trace.top_k for s in stored} == {SPACE.top_k}
    prompts = tiny_prompts().head(3)
    assert all(set(s.prompt_ids) <= set(prompts.ids) and len(s.prompt_ids) == s.batch_size for s in stored)
    config = TuneConfig(label="tiny", output=tmp_path / "profiles" / "tiny.yaml", buckets=(1, 2), trials=4,
                        space=SPACE, confirm_prompts=1, confirm_max_new_tokens=6, context_length=128)
    outcome = tune_and_publish(pair, store, SETUP, config, prompts, progress=False)
    loaded = load_profile(config.output)
    assert loaded.version == outcome.published.version and loaded.profile.source == "measured"
    assert [b.max_batch_size for b in loaded.profile.settings.buckets] == [1, 2]
    provenance = loaded.profile.provenance
    assert provenance["db"] == str(store.path)
    assert [t["study"] for t in provenance["tuning"]] == [r.study for r in outcome.results]
    live = provenance["live_confirmation"]
    # Every bucket was run live against plain decoding (the gate), speculating or not.
    assert [c["max_batch_size"] for c in live] == [r.settings.max_batch_size for r in outcome.results]
    assert all(c["live_cast_tokens_per_s"] > 0 and c["live_plain_tokens_per_s"] > 0 and c["speed_factor"] > 0
               for c in live)
    assert provenance["live_gate"]["margin"] == 0.15 and "overhead" in provenance["cost_tables"]
    assert provenance["cost_tables"]["target"]["timed_n"] == [1, 2, 4, 8]
    published = store.publications()
    assert {(p.study, p.trial) for p in published} == {(r.study, r.trial) for r in outcome.results}
    assert {p.version for p in published} == {loaded.version}
    assert not list(config.output.parent.glob(".*"))  # no candidate or temp file left behind
    printed = report.tuned(outcome, str)
    for result in outcome.results:  # each bucket's line names what it publishes, its branch included
        b = result.settings
        assert (f"bucket <= {b.max_batch_size}: " in printed
                and f"fifo {b.fifo_len}, branch {b.lookup_depth}; speculate: {str(b.speculate).lower()}" in printed)


def test_a_speculating_last_bucket_untuned_at_the_tables_larger_batches_is_named():
    def results(*speculates: bool) -> list[BucketResult]:
        return [BucketResult(BucketSettings(size, speculate=on), "s", 0, 1, 1, 1.0, 1.0, 0)
                for size, on in zip((1, 4), speculates)]

    note = larger_batches_note(results(False, True), traced_batch=4, profiled=(1, 4, 16))
    assert note is not None and "bucket <= 4" in note and "batch 16" in note and "--buckets" in note
    assert larger_batches_note(results(True, False), 4, (1, 4, 16)) is None  # plain decoding above: nothing to judge
    assert larger_batches_note(results(False, True), 16, (1, 4, 16)) is None  # traces reach the tables' largest batch
    assert larger_batches_note(results(False, True), 4, (1, 4)) is None


def test_tune_refuses_a_space_larger_than_the_recording(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    recorded = r"no stored trace covers the space .* recorded \(top_k, depth, lookup depth\): \[\(3, 3, 8\)\]"
    for space in (SearchSpace(max_depth=5, top_k=3, max_tokens=10),  # deeper than the drafted layers
                  SearchSpace(max_depth=3, top_k=3, max_tokens=10, lookup_depth=9)):  # a longer lookup branch
        config = TuneConfig(label="tiny", output=tmp_path / "tiny.yaml", buckets=(1,), trials=2, space=space,
                            confirm_prompts=0)
        with pytest.raises(AutotuneError, match=recorded):
            tune_and_publish(pair, store, SETUP, config, tiny_prompts(), progress=False)
        assert not config.output.exists()


def test_bench_compares_the_tuner_with_the_exhaustive_grid_and_runs_live(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    grid = Grid(c_values=(0.1, 10.0), depths=(1, 3), top_ks=(1, 3), budgets=(4,), fifo_lens=(2,))
    config = BenchConfig(1, 1, grid, trials=3, seeds=(0,), max_traces=4, confirm_prompts=1,
                         confirm_max_new_tokens=6, context_length=128, study_prefix="bench-test")
    with pytest.raises(AutotuneError, match="--trials: at most 3"):
        run_bench(pair, store, SETUP, replace(config, trials=4), tiny_prompts(), progress=False)
    result = run_bench(pair, store, SETUP, config, tiny_prompts(), progress=False)
    assert result["grid"]["size"] == 32 and result["goals"]["evaluations_fraction"] == 3 / 32
    assert 0 < result["goals"]["tuned_over_grid_best_min"] <= 1.0 + 1e-9  # the grid holds the corners
    assert result["live_confirmation"]["timed_steps"]["cast"] > 0 and result["live_confirmation"]["rounds"] == 3
    assert set(result["replay_baselines_tokens_per_s"]) == {"vanilla", "eagle2"}


def test_a_profile_from_another_machine_is_re_tuned_here_without_profiling_or_recording(tmp_path):
    """`tune --calibrate-from`: the other machine's tables (here the tiny grid's, 3x
    slower) fitted to anchors timed on this pair, then the tuner and the live gate on
    the stored traces; the database gains no measurement and no trace."""
    from autotune.costs import calibrated_costs
    from sglang_cast.engine.table_calibration import calibrate

    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store)
    foreign = measured_costs(store, SETUP).costs
    foreign = replace(foreign, target=replace(foreign.target, ms=3 * foreign.target.ms),
                      draft=replace(foreign.draft, ms=3 * foreign.draft.ms))
    with sqlite3.connect(store.path) as db:
        db.execute("DELETE FROM measurements")  # tune must not read this machine's measurements
    traces = store.trace_count("tiny-target", "mirror-draft")
    served = calibrate(pair.target, pair.draft, foreign, 2)
    assert served.fit.target.scale < 1  # this machine runs the 3x-slower tables' forwards faster
    costs = calibrated_costs("other.yaml", foreign, served.fit, served.report(foreign))
    config = TuneConfig(label="tiny", output=tmp_path / "tiny.yaml", buckets=(1, 2), trials=3, space=SPACE,
                        confirm_prompts=1, confirm_max_new_tokens=6, context_length=128)
    outcome = tune_and_publish(pair, store, SETUP, config, tiny_prompts().head(3), progress=False,
                               format_costs={"fp32": costs})
    provenance = load_profile(config.output).profile.provenance
    assert provenance["cost_tables"]["calibrated_from"]["profile"] == "other.yaml"
    assert provenance["cost_tables"]["calibrated_from"]["target"]["scale"] == pytest.approx(served.fit.target.scale,
                                                                                          abs=1e-4)
    assert outcome.published.profile.settings.costs.target(1, 32, 1) == pytest.approx(
        served.fit.target(foreign.target(1, 32, 1)), rel=1e-4)  # the YAML keeps 6 decimals
    assert store.trace_count("tiny-target", "mirror-draft") == traces
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM measurements").fetchone() == (0,)


def test_the_search_space_never_suggests_more_verify_tokens_than_the_trees_pool_holds():
    """``m`` above ``pool_size + 1`` verifies nothing more and SGLang refuses it as
    ``--speculative-num-draft-tokens``: a depth-1 top-k 6 tree holds 6 nodes, so m <= 7."""
    import optuna

    trial = optuna.trial.FixedTrial({"top_k": 6, "max_depth": 1, "num_verify_tokens": 10, "c1": 1.0, "c2": 1.0,
                                     "c3": 1.0, "fifo_len": 4, "lookup_depth": 3})
    bucket = SearchSpace(max_depth=6, top_k=8, max_tokens=32).suggest(trial, 1)
    shape = bucket.shape
    assert (shape.top_k, shape.max_depth, shape.num_verify_tokens) == (6, 1, 7)
    assert bucket.lookup_depth == 3  # the branch's depth is searched with the shape
    assert SearchSpace(lookup_depth=0).suggest(trial, 1).lookup_depth == 0  # 0: never a branch
    assert TreeShape.fitted(2, 3, 32).num_verify_tokens == 2 + 2 * 4 + 1
    assert TreeShape.fitted(8, 6, 20).num_verify_tokens == 20


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").rglob("*.yaml")),
                         ids=lambda p: str(p.relative_to(ROOT / "profiles")))
def test_every_shipped_profile_verifies_no_more_tokens_than_its_trees_hold(path):
    """What SGLang's launcher derives from a profile (``--speculative-num-draft-tokens``,
    the widest bucket's ``m``) must fit its tree (plugin_config.StaticShape.check)."""
    for bucket in load_profile(path).profile.settings.buckets:
        assert bucket.shape.num_verify_tokens <= bucket.shape.pool_size + 1, (path.name, bucket)
