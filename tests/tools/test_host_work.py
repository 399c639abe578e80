"""tools/host_work.py: host work outside the forwards, on the tests' tiny random pair."""

import contextlib
import io
import json

import pytest
import torch

from sglang_cast.cast import DraftTree
from sglang_cast.engine import draft_expander
from sglang_cast.engine.runner import SpeculativeRunner
from sglang_cast.models import kv_cache
from tools.host_work import main


def engine_functions() -> tuple:
    """What the tool patches while it measures, and must put back."""
    return DraftTree.add_layer, SpeculativeRunner.iterate, kv_cache.to_device, draft_expander.to_device


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """One run of the tool for every test here (it decodes each policy five times over):
    plain decoding and CAST at batch 1, the breakdown included; its JSON rows by policy,
    its printout, and the engine functions before and after it."""
    out, printed, threads = tmp_path_factory.mktemp("host-work") / "host.json", io.StringIO(), torch.get_num_threads()
    before = engine_functions()
    try:
        with contextlib.redirect_stdout(printed):
            code = main(["--policies", "vanilla,cast", "--batch-size", "1", "--max-new-tokens", "6", "--rounds", "1",
                         "--breakdown", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)  # the tool runs on one thread; the rest of the session does not
    rows = {row["policy"]: row for row in json.loads(out.read_text())["results"]}
    return {"code": code, "rows": rows, "printed": printed.getvalue(), "before": before, "after": engine_functions()}


def test_host_work_reports_time_and_ops_outside_the_forwards_per_policy(report):
    rows = report["rows"]
    assert report["code"] == 0 and set(rows) == {"vanilla", "cast"}
    assert rows["vanilla"]["depth"] == 0 and rows["cast"]["depth"] > 0
    for row in rows.values():
        assert row["outside_forwards_ms"] > 0 and len(row["outside_forwards_ms_rounds"]) == 1
    # drafting a tree is host work plain decoding does not do
    assert rows["cast"]["outside_forwards_ops"] > rows["vanilla"]["outside_forwards_ops"] > 0
    assert "outside forwards" in report["printed"]


def test_breakdown_times_each_engine_function_and_puts_them_back(report):
    rows = {policy: row["breakdown_us"] for policy, row in report["rows"].items()}
    # plain decoding grows no tree; CAST drafts, keeps and grows layers
    assert "DraftTree.add_layer" not in rows["vanilla"] and rows["cast"]["DraftTree.add_layer"] > 0
    assert rows["cast"]["CastPlan.keep"] > 0 and rows["cast"]["SpeculativeRunner.draft_forward"] > 0
    for row in rows.values():
        assert row["SpeculativeRunner.target_forward"] > 0 and row["SpeculativeRunner.iterate"] > 0
    assert report["after"] == report["before"]
    assert "µs per iteration" in report["printed"]


@pytest.mark.parametrize("argv, message", [
    (["--policies", "nope"], "--policies: unknown ['nope']"),
    (["--batch-size", "1,x"], "--batch-size: expected comma-separated integers"),
    (["--batch-size", "0"], "--batch-size: every size must be >= 1"),
    (["--rounds", "0"], "--rounds: must be >= 1, got 0"),
])
def test_bad_flags_are_refused_with_the_flag_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_device_ops_count_what_would_launch_between_the_forwards(report):
    """Plain decoding launches two ops between its forwards (the greedy tokens and
    their copy to the host); a drafted tree adds each layer's softmax, top-k and copy.  The count
    must see device data made on the host and sent (a verify that ran on the device
    again would raise it), and it must leave the engine's modules as they were."""
    rows = report["rows"]
    assert 1 <= rows["vanilla"]["device_ops"] <= 3
    assert rows["cast"]["device_ops"] > rows["vanilla"]["device_ops"] + 5 * rows["cast"]["depth"]
    assert report["after"] == report["before"]
