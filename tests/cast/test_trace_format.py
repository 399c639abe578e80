"""Traces are versioned (sglang_cast.cast.TRACE_FORMAT): a trace recorded before
the full candidate pool, or by a run that did not commit through its lookup branch,
is refused with a clear error, never replayed or mixed in."""

import sqlite3

import pytest

from autotune.errors import AutotuneError
from autotune.store import Store
from sglang_cast.cast import TRACE_FORMAT, TraceIteration
from support.autotune import make_trace


def test_a_trace_round_trips_with_its_format():
    data = make_trace().to_dict()
    assert data["format"] == TRACE_FORMAT == 3
    assert TraceIteration.from_dict(data).tree.size == make_trace().tree.size


@pytest.mark.parametrize("old", [None, 1, 2])
def test_an_older_trace_is_refused_naming_the_format_and_the_fix(old):
    data = make_trace().to_dict()
    if old is None:
        del data["format"]  # what format 1 wrote
    else:
        data["format"] = old
    with pytest.raises(ValueError, match=rf"format must be 3 .* got {old or 1}; .*cast-autotune collect"):
        TraceIteration.from_dict(data)


def store_with_pre_versioning_traces(path) -> None:
    """A database as written before traces were versioned: no ``trace_format`` column."""
    store = Store(path)
    store.add_traces("cpu", "t", "d", "prompts", "old-run", [(i, ("p:0",), make_trace(i)) for i in range(3)])
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE traces DROP COLUMN trace_format")


def test_a_database_of_old_traces_is_refused_and_never_mixed(tmp_path):
    path = tmp_path / "old.db"
    store_with_pre_versioning_traces(path)
    store = Store(path)  # adds the column, marking the old rows as format 1
    assert store.trace_count("t", "d") == 0 and store.trace_count("t", "d", current=False) == 3
    with pytest.raises(AutotuneError, match=r"3 trace\(s\) .* older trace format .*cast-autotune collect"):
        store.traces("t", "d")
    store.add_traces("cpu", "t", "d", "prompts", "new-run", [(0, ("p:0",), make_trace(7))])
    assert [s.run_id for s in store.traces("t", "d")] == ["new-run"]
    assert store.trace_count("t", "d") == 1
