"""tools/prefill_ab.py: the admission A/B on the embedded model (two prompts, one round)."""

import json

import pytest

from tools.prefill_ab import VARIANTS, main


def test_each_variant_admits_every_prompt_and_the_record_keeps_every_round(tmp_path, capsys):
    out = tmp_path / "prefill.json"
    assert main(["--weight-format", "fp32", "--num-prompts", "2", "--rounds", "2", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert sum(record["groups"]) == 2 and len(record["prompt_lengths"]) == 2
    assert set(record["rounds_ms"]) == set(VARIANTS)
    assert all(len(ms) == 2 and min(ms) > 0 for ms in record["rounds_ms"].values())
    assert set(record["ratios"]) == {"grouped/per_prompt_full_head", "grouped/per_prompt"}
    assert "grouped/per_prompt: median" in capsys.readouterr().out


def test_a_count_below_one_is_refused_with_the_flag_named(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--rounds", "0"])
    assert exit_info.value.code == 2 and "--rounds: must be >= 1, got 0" in capsys.readouterr().err
