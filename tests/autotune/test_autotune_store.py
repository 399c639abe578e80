"""The autotuner's SQLite store: round trips, two concurrent writer processes, and
one-line errors for missing / locked / corrupted / read-only databases."""

import multiprocessing
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
import torch

from autotune.cli import main
from autotune.errors import AutotuneError
from autotune.store import Setup, Store
from sglang_cast.engine.timing import Timing
from support.autotune import make_trace

SETUP = Setup.current("test-cpu", "tiny-target", "tiny-draft", "float32")


def test_measurements_round_trip_and_newest_row_wins(tmp_path):
    store = Store(tmp_path / "nested" / "dir" / "a.db")  # missing parent directories are created
    store.add_measurement(SETUP, "target", 2, 256, 4, Timing(10.0, 9.0, 12.0, 5), 0.5)
    store.add_measurement(SETUP, "target", 2, 256, 4, Timing(11.0, 10.0, 13.0, 5), 0.7)
    store.add_measurement(SETUP, "draft", 1, 256, 1, Timing(1.0, 0.9, 1.1, 3), 0.5)
    other = Setup.current("other-device", "tiny-target", "tiny-draft", "float32")
    store.add_measurement(other, "target", 1, 256, 1, Timing(99.0, 99.0, 99.0, 1), 0.0)
    rows = {(r.role, r.batch_size, r.context_len, r.n): r for r in Store(store.path).measurements(SETUP)}
    assert set(rows) == {("target", 2, 256, 4), ("draft", 1, 256, 1)}
    target = rows[("target", 2, 256, 4)]
    assert (target.median_ms, target.p10_ms, target.p90_ms, target.repeats) == (11.0, 10.0, 13.0, 5)
    assert target.torch_version == str(torch.__version__)
    assert {s.device for s in store.setups()} == {"test-cpu", "other-device"}


def test_missing_tables_name_what_changed_since_the_profile(tmp_path):
    """A re-trained head has a new digest, and its tables are missing though the old head's
    are there: the error says that the draft head changed, not only "profile first"."""
    from autotune.costs import measured_costs
    store = Store(tmp_path / "a.db")
    old_head = Setup.current("test-cpu", "tiny-target", "assets/head#sha256:aaaaaaaaaaaa", "float32")
    store.add_measurement(old_head, "target", 1, 128, 1, Timing(1.0, 1.0, 1.0, 1), 0.0)
    further = Setup.current("test-cpu", "tiny-target", "tiny-draft", "bfloat16")  # newer, two fields off
    store.add_measurement(further, "target", 1, 128, 1, Timing(1.0, 1.0, 1.0, 1), 0.0)
    new_head = Setup.current("test-cpu", "tiny-target", "assets/head#sha256:bbbbbbbbbbbb", "float32")
    with pytest.raises(AutotuneError) as err:
        measured_costs(store, new_head)
    message = str(err.value)
    assert "draft_model 'assets/head#sha256:aaaaaaaaaaaa' (asked: 'assets/head#sha256:bbbbbbbbbbbb')" in message
    assert "the draft head changed" in message and "cast-autotune profile" in message
    other_device = Setup.current("other-cpu", "tiny-target", "assets/head#sha256:aaaaaaaaaaaa", "float32")
    with pytest.raises(AutotuneError, match="differs in device 'test-cpu' \\(asked: 'other-cpu'\\); run") as err:
        measured_costs(store, other_device)
    assert "the draft head changed" not in str(err.value)
    with pytest.raises(AutotuneError, match="holds no measurements yet"):
        measured_costs(Store(tmp_path / "empty.db"), new_head)


def test_traces_round_trip(tmp_path):
    store = Store(tmp_path / "a.db")
    traces = [make_trace(seed) for seed in range(3)]
    store.add_traces("cpu", "tiny-target", "tiny-draft", "prompts", "run1",
                     [(i, ("p:0", "p:1"), t) for i, t in enumerate(traces)])
    assert store.trace_count("tiny-target", "tiny-draft") == 3
    assert store.trace_count("tiny-target", "other-draft") == 0
    loaded = store.traces("tiny-target", "tiny-draft")
    assert [s.iteration for s in loaded] == [0, 1, 2]
    assert loaded[0].prompt_ids == ("p:0", "p:1") and loaded[0].batch_size == 2
    for original, again in zip(traces, loaded):
        for name in ("context_lens", "child_tokens", "child_probs", "target_argmax"):
            assert torch.equal(getattr(original, name), getattr(again.trace, name))
        assert np.array_equal(original.tree.values, again.trace.tree.values)
        assert torch.equal(original.verdicts(), again.trace.verdicts())


def _write_measurements(path: str, count: int) -> None:
    store = Store(path)
    for i in range(count):
        store.add_measurement(SETUP, "target", 1 + i % 4, 128, 1 + i, Timing(float(i), 0.0, 0.0, 1), 0.0)


def _write_traces(path: str, count: int) -> None:
    store = Store(path)
    trace = make_trace()
    for i in range(count):
        store.add_traces("cpu", "tiny-target", "tiny-draft", "prompts", "run", [(i, ("p:0",), trace)])


def test_two_writer_processes_lose_no_rows(tmp_path):
    path = str(tmp_path / "shared.db")
    Store(path)  # create the schema once, as the first CLI call would
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_measurements, args=(path, 60)),
               context.Process(target=_write_traces, args=(path, 60))]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=120)
    assert [w.exitcode for w in writers] == [0, 0]
    store = Store(path)
    assert len(store.measurements(SETUP)) == 60
    assert store.trace_count("tiny-target", "tiny-draft") == 60
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_corrupted_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.db"
    path.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.raises(AutotuneError, match="not a valid SQLite database"):
        Store(path)


def test_locked_database_times_out_with_a_clear_error(tmp_path):
    path = tmp_path / "a.db"
    Store(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(AutotuneError, match=r"is locked by another process \(waited 0.2 s\)"):
            Store(path, timeout_s=0.2).add_measurement(SETUP, "target", 1, 128, 1, Timing(1.0, 1.0, 1.0, 1), 0.0)
    finally:
        holder.rollback()
        holder.close()


def test_unwritable_locations_are_clear_errors(tmp_path):
    with pytest.raises(AutotuneError, match="cannot"):
        Store("/proc/autotune-test/a.db")  # a directory nobody, not even root, can create
    if os.geteuid() != 0:  # root ignores file permissions
        path = tmp_path / "ro.db"
        Store(path)
        path.chmod(0o444)
        with pytest.raises(AutotuneError, match="read-only"):
            Store(path)


def test_cli_reports_database_errors_in_one_line_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 200)
    assert main(["show", "--db", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert "not a valid SQLite database" in err and str(bad) in err


def test_cli_process_prints_no_traceback_for_a_corrupted_database(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 200)
    run = subprocess.run([sys.executable, "-m", "autotune", "show", "--db", str(bad)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().startswith("cast-autotune show: error:") and run.stderr.count("\n") == 1


def test_a_head_retrained_in_place_gets_a_new_draft_id(tmp_path):
    """Traces are keyed by draft id: a retrained head at the same path must not
    share the old head's traces."""
    from sglang_cast.models.digest import weights_digest

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")
    (head / "model.safetensors").write_bytes(b"old weights")
    before = weights_digest(head)
    assert before == weights_digest(head) and before.startswith("sha256:")
    (head / "model.safetensors").write_bytes(b"new weights")
    assert weights_digest(head) != before


def test_step_samples_survive_a_reopen_and_stay_with_their_setup(tmp_path):
    from autotune.store import TimedStep

    store = Store(tmp_path / "a.db")
    steps = [TimedStep(2, 100, 3, 7, 6, 12.5, 9.0), TimedStep(2, 103, 0, 0, 2, 5.0, 4.25)]
    store.add_steps(SETUP, "profile", "k4-d3-m8", steps, 0.5)
    other = Setup.current("other-device", "tiny-target", "tiny-draft", "float32")
    store.add_steps(other, "live", "plain", [TimedStep(1, 50, 0, 0, 1, 1.0, 1.0)], 0.0)
    store.close()
    reopened = Store(store.path)
    assert [r.timed() for r in reopened.step_records(SETUP)] == steps
    assert [r.timed().sample().residual_ms for r in reopened.step_records(SETUP)] == [3.5, 0.75]
    assert reopened.step_cells(SETUP, "profile") == {(2, "k4-d3-m8")}
    assert reopened.step_cells(SETUP, "live") == set() and len(reopened.step_records(other, "live")) == 1


def test_steps_charged_against_replaced_forward_tables_are_dropped(tmp_path):
    from autotune.store import TimedStep

    store = Store(tmp_path / "a.db")
    store.add_measurement(SETUP, "target", 1, 256, 1, Timing(2.0, 2.0, 2.0, 1), 0.1)
    old = [TimedStep(1, 100, 1, 2, 2, 12.5, 9.0)]
    store.add_steps(SETUP, "profile", "k2-d1-m3", old, 0.5)
    store.add_steps(SETUP, "live", "plain", old * 3, 0.5)
    other = Setup.current("other-device", "tiny-target", "tiny-draft", "float32")
    store.add_steps(other, "live", "plain", old, 0.0)
    assert store.drop_steps_older_than_forwards(SETUP) == {}  # the tables have not changed since
    store.add_measurement(SETUP, "target", 1, 256, 5, Timing(4.0, 4.0, 4.0, 1), 0.1)  # a point added
    store.add_steps(SETUP, "profile", "plain", old, 0.5)  # timed against the new tables
    assert store.drop_steps_older_than_forwards(SETUP) == {"profile": 1, "live": 3}
    assert [r.shape for r in store.step_records(SETUP)] == ["plain"]
    assert len(store.step_records(other)) == 1 and store.drop_steps_older_than_forwards(SETUP) == {}


def test_a_database_from_before_the_step_table_migrates_on_open(tmp_path):
    from autotune.store import TimedStep

    path = tmp_path / "old.db"
    Store(path).add_measurement(SETUP, "target", 1, 256, 1, Timing(2.0, 2.0, 2.0, 1), 0.1)
    with sqlite3.connect(path) as conn:  # make it the previous version's file
        conn.execute("DROP TABLE step_samples")
        conn.execute("ALTER TABLE published_profiles DROP COLUMN live_confirmation")
        conn.execute("INSERT INTO published_profiles (path, label, version, source, created) "
                     "VALUES ('p.yaml', 'cpu', 'v1', 'measured', '2026-01-01 00:00:00')")
    store = Store(path)
    assert [m.median_ms for m in store.measurements(SETUP)] == [2.0]
    assert [(p.version, p.live_confirmation) for p in store.publications()] == [("v1", None)]
    store.add_steps(SETUP, "profile", "plain", [TimedStep(1, 10, 0, 0, 1, 3.0, 2.0)], 0.0)
    assert len(Store(path).step_records(SETUP)) == 1
