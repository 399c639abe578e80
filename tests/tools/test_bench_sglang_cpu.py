"""tools/bench_sglang_cpu.py: the configurations it serves and the ratios it summarises
(no server starts here; the bench itself runs SGLang, see its docstring)."""

import argparse

import pytest

from tools.bench_sglang_cpu import cast_profiles, configurations, parse_ab, per_round_ratios

PROFILE = "profiles/sglang/cpu.yaml"


def test_an_ab_profile_is_served_as_its_own_cast_configuration(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("buckets: []\n")
    profiles = cast_profiles(PROFILE, [parse_ab(f"run23lr={old}")], tmp_path)
    assert profiles["cast"] == PROFILE and profiles["cast@run23lr"] == str(old)
    assert (tmp_path / "profile_nolookup.yaml").is_file() and profiles["cast-nolookup"].endswith("profile_nolookup.yaml")
    commands = configurations("M", "H", profiles)
    served = {name: command[command.index("--cast-profile") + 1] for name, command in commands.items()
              if "--cast-profile" in command}
    assert served == profiles
    assert "--cast-profile" not in commands["plain"] and "--cast-profile" not in commands["eagle3"]


def test_without_a_profile_cast_takes_the_launchers_choice(tmp_path):
    commands = configurations("M", "H", cast_profiles(None, [], tmp_path))
    assert "--cast-profile" not in commands["cast"] and "cast-nolookup" not in commands


@pytest.mark.parametrize("entry, says", [("run23lr", "NAME=PROFILE"), ("=x.yaml", "NAME=PROFILE"),
                                         ("old=missing/profile.yaml", "no such profile file")])
def test_a_bad_ab_entry_is_refused_with_what_it_takes(entry, says):
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        parse_ab(entry)


def test_ratios_are_taken_against_the_baseline_in_the_same_round():
    def row(config, round_, throughput, concurrency=1):
        return {"config": config, "round": round_, "dataset": "mt_bench", "concurrency": concurrency,
                "output_throughput": throughput}

    rows = [row("plain", 0, 10.0), row("cast", 0, 12.0), row("plain", 1, 20.0), row("cast", 1, 22.0),
            row("cast", 2, 30.0), row("cast@old", 2, 24.0),  # no plain round 2: skipped against plain
            row("plain", 0, 40.0, concurrency=4), row("cast", 0, 44.0, concurrency=4),
            {"config": "cast", "round": 0, "concurrency": 1, "probe_accept_length": 1.7}]  # not a bench row
    assert per_round_ratios(rows, "cast", "plain", "mt_bench", 1) == pytest.approx([1.2, 1.1])
    assert per_round_ratios(rows, "cast", "plain", "mt_bench", 4) == pytest.approx([1.1])
    assert per_round_ratios(rows, "eagle3", "plain", "mt_bench", 1) == []
    assert per_round_ratios(rows, "cast@old", "cast", "mt_bench", 1) == pytest.approx([0.8])
