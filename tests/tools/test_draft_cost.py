"""tools/draft_cost.py: a draft forward's cost per weight format and its LM head's share
(on the embedded model; the flags are checked without loading it)."""

from __future__ import annotations

import json

import pytest

from tools import draft_cost


@pytest.mark.parametrize("argv, message", [
    (["--formats", "fp32,int3"], "argument --formats: expected comma-separated formats of fp32, bf16, int8, int4"),
    (["--rows", "7,1"], "argument --rows: expected increasing comma-separated integers in [1, 64], got '7,1'"),
    (["--rounds", "0"], "argument --rounds: expected an integer >= 1, got '0'"),
])
def test_bad_flags_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        draft_cost.parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and "usage:" not in err


@pytest.mark.slow
def test_every_format_and_row_count_is_timed_with_its_parts(tmp_path):
    out = tmp_path / "cost.json"
    assert draft_cost.main(["--formats", "fp32,int8", "--rows", "2,3", "--rounds", "1", "--threads", "1",
                            "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["format"], r["rows"]) for r in record["results"]] == [("fp32", 2), ("fp32", 3), ("int8", 2), ("int8", 3)]
    for row in record["results"]:
        assert 0 < row["lm_head"] < row["forward"] and 0 < row["fc"] < row["forward"]
        assert row["lm_head_share"] == pytest.approx(row["lm_head"] / row["forward"])
    assert record["target_forward_ms"] > 0 and record["cpu"]  # timed without a one-row count
