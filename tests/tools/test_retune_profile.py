"""tools/retune_profile.sh: its arguments, and what each stage runs (a stand-in python logs the calls)."""

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "retune_profile.sh"


@pytest.fixture
def project(tmp_path):
    """A folder laid out as the repository root for the script: a `.venv/bin/python` that logs its
    arguments (one call per line) and, for the tune stage, writes the profile its --output names."""
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/usr/bin/env bash\necho "$*" >> "$(dirname "$0")/calls"\n'
                      'while [ $# -gt 0 ]; do [ "$1" = --output ] && echo "new" > "$2"; shift; done\n')
    python.chmod(0o755)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "cpu-avx512.yaml").write_text("old")
    return tmp_path


def run(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=project, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=60)


def calls(project: Path) -> list[str]:
    log = project / ".venv" / "bin" / "calls"
    return log.read_text().splitlines() if log.is_file() else []


FORMATS = "int4vnni/int8vnni+int8vnni,int4vnni/int8vnni+int8"
ARGS = ["--record", "rec", "--profile", "profiles/cpu-avx512.yaml", "--formats", FORMATS, "--threads", "2"]


def test_help_prints_the_usage():
    done = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--profile OLD" in done.stdout and "--ab-batches B" in done.stdout
    usage = done.stdout.splitlines()
    assert usage[0] == "Usage (repository root):" and usage[-1].endswith("(default: all five, in that order)")


@pytest.mark.parametrize("args, message", [
    (["--profile", "profiles/cpu-avx512.yaml", "--formats", FORMATS], "--record DIR is required"),
    (["--record", "r", "--profile", "none.yaml", "--formats", FORMATS], "--profile: 'none.yaml' is not a file"),
    (["--record", "r", "--profile", "profiles/cpu-avx512.yaml"], "--formats is required"),
    ([*ARGS, "--trials", "0"], "--trials takes a whole number >= 1; got '0'"),
    ([*ARGS, "--b1-prompts", "0"], "--b1-prompts takes a whole number >= 1; got '0'"),
    ([*ARGS, "--max-traces", "all"], "--max-traces takes a whole number >= 1; got 'all'"),
    ([*ARGS, "--bench-batches", "1,,2"], "batch sizes are comma-separated whole numbers >= 1; got '1,,2'"),
    ([*ARGS, "ship"], "unknown argument 'ship' (stages are collect, profile, tune, ab, bench)"),
    (["--record"], "--record needs a value"),
])
def test_bad_arguments_are_named_and_nothing_runs(project, args, message):
    done = run(project, *args)
    assert done.returncode == 2 and message in done.stderr and "Usage" in done.stderr
    assert calls(project) == []


def test_collect_records_b1_alone_the_other_small_batches_in_one_call_and_each_large_one_alone(project):
    assert run(project, *ARGS, "--batches", "1,2,4,32,64", "--b1-prompts", "24", "collect").returncode == 0
    b1, small, b32, b64 = calls(project)
    assert b1.startswith("-m autotune collect --threads 2 --batch-size 1 --num-prompts 24 --max-new-tokens 48")
    assert small.startswith("-m autotune collect --threads 2 --batch-size 2,4 --num-prompts 16 --max-new-tokens 48")
    assert "--batch-size 32 --num-prompts 32 --max-new-tokens 32" in b32
    assert "--batch-size 64 --num-prompts 64" in b64
    assert (project / "rec" / "collect.log").read_text().startswith("== collect ")


def test_b1_is_recorded_on_48_prompts_and_the_tune_replays_every_iteration_by_default(project):
    assert run(project, *ARGS, "collect", "tune").returncode == 0
    b1, *_, tune = calls(project)
    assert b1.startswith("-m autotune collect --threads 2 --batch-size 1 --num-prompts 48 ")
    assert "--trials 150 --max-traces 100000 " in tune


def test_profile_and_tune_cover_every_format_and_publish_beside_the_record(project):
    assert run(project, *ARGS, "--trials", "12", "--max-traces", "900", "profile", "tune").returncode == 0
    profile, tune = calls(project)
    assert profile.startswith("-m autotune profile --gpu cpu --threads 2") and f"--weight-format {FORMATS}" in profile
    assert "--batch-sizes 1,2,4,8,16,32" in profile
    assert tune.startswith("-m autotune tune") and f"--weight-format {FORMATS}" in tune and "--trials 12" in tune
    assert "--max-traces 900" in tune
    assert "--incumbent profiles/cpu-avx512.yaml " in tune  # the replaced profile's trees join the studies
    assert "--buckets 1,2,4,8,16,32" in tune and tune.endswith("--output rec/cpu-avx512.yaml")
    assert (project / "rec" / "cpu-avx512.yaml").read_text() == "new\n"


def test_ab_runs_the_new_profile_against_the_old_and_bench_against_plain_per_dataset(project):
    assert run(project, *ARGS, "tune").returncode == 0
    assert run(project, *ARGS, "--ab-batches", "1", "ab", "bench").returncode == 0
    ab = [c for c in calls(project) if c.startswith("tools/bench.py")]
    assert len(ab) == 4
    for call, dataset in zip(ab, ("mt_bench", "humaneval") * 2):
        assert "--methods vanilla,cast --profile rec/cpu-avx512.yaml" in call and f"datasets/{dataset}.jsonl" in call
    assert "--batch-size 1 --rounds 5 --against-profile profiles/cpu-avx512.yaml" in ab[0]
    assert ab[0].endswith("--json rec/ab_mt_bench.json --markdown rec/ab_mt_bench.md")
    assert "--batch-size 1,2,4,8,16 --rounds 3 --json rec/bench_humaneval.json" in ab[3]
    assert "--against-profile" not in ab[3]


def test_ab_before_a_tune_says_so(project):
    done = run(project, *ARGS, "ab")
    assert done.returncode == 2 and "ab: no rec/cpu-avx512.yaml yet (run the tune stage first)" in done.stderr
    assert calls(project) == []
