"""tools/continue_head.sh: its arguments, and what each stage runs (a stand-in python logs the calls)."""

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "continue_head.sh"


@pytest.fixture
def project(tmp_path):
    """A folder laid out as the repository root for the script: a `.venv/bin/python` that logs its
    arguments (one call per line) and prints nothing, a previous head, a previous run's record and run
    24's trained head."""
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/usr/bin/env bash\necho "$*" >> "$(dirname "$0")/calls"\n')
    python.chmod(0o755)
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "config.json").write_text("{}")
    (tmp_path / "previous").mkdir()
    for benchmark in ("humaneval", "mt_bench"):
        (tmp_path / "previous" / f"{benchmark}.json").write_text(f'"{benchmark} rows"')
    (tmp_path / "work" / "run24" / "head").mkdir(parents=True)
    (tmp_path / "work" / "run24" / "head" / "config.json").write_text("{}")  # as its train stage leaves it
    (tmp_path / "work" / "run24" / "report.json").write_text("{}")
    (tmp_path / "docs" / "results").mkdir(parents=True)
    return tmp_path


def run(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=project, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "W": str(project / "work")}, timeout=60)


def calls(project: Path) -> list[str]:
    log = project / ".venv" / "bin" / "calls"
    return log.read_text().splitlines() if log.is_file() else []


RUN24 = ["--run", "24", "--seed", "23", "--from", "run23=head", "--record", "record"]


def test_help_prints_the_usage():
    done = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--from NAME=HEAD" in done.stdout and "--baseline-record DIR" in done.stdout
    usage = done.stdout.splitlines()
    assert usage[0] == "Usage (repository root):" and usage[-1].endswith("docs/results/draft_head_report_NAME.json)")


@pytest.mark.parametrize("args, message", [
    (["--run", "x", "--seed", "1", "--from", "a=head", "--record", "r"], "--run takes a whole number, or one with a label"),
    (["--run", "24", "--seed", "1.5", "--from", "a=head", "--record", "r"], "--seed takes a whole number; got '1.5'"),
    ([*RUN24, "--data-from", "99", "data"], "--data-from: "),
    (["--run", "1", "--seed", "1", "--record", "r"], "--from NAME=HEAD and --record DIR are required"),
    (["--run", "1", "--seed", "1", "--from", "a=missing", "--record", "r"], "missing is not a draft head folder"),
    ([*RUN24, "tune"], "unknown argument 'tune' (stages are data, train, tau, gap, served, soup, eval)"),
    ([*RUN24, "served"], "the served stage needs --served-format F"),
    (["--run"], "--run needs a value"),
    (["--head", "soup=missing", "--from", "a=head", "--record", "r", "tau"], "--head: missing is not a draft head folder"),
    (["--head", "soup", "--from", "a=head", "--record", "r", "tau"], "--head takes NAME=DIR; got 'soup'"),
    (["--head", "soup=head", "--from", "a=head", "--record", "r", "tau", "train"], "--head and --soup judge a finished head"),
    (["--head", "soup=head", "--from", "a=head", "--record", "r"], "--head and --soup judge a finished head"),
    (["--head", "soup=head", "--from", "a=head", "--record", "r", "soup"], "the soup stage needs --soup A,B"),
    (["--soup", "41", "--from", "a=head", "--record", "r"], "--soup takes two or more run numbers, comma-separated (41,42); got '41'"),
    (["--soup", "41,42", "--head", "soup=head", "--from", "a=head", "--record", "r"], "give one"),
    (["--soup", "41,42", "--from", "a=head", "--record", "r", "data"], "--head and --soup judge a finished head"),
    (["--soup", "41,42", "--from", "a=head", "--record", "r", "soup"], "/work/run41 has no head (run its train stage first)"),
    ([*RUN24, "eval"], "a run's eval is its train stage's"),
    (["--run", "25", *RUN24[2:], "tau"], "/work/run25/head yet: its train stage (a run) or soup stage (--soup) makes it"),
    (["--soup", "41,42", "--from", "a=head", "--record", "r", "tau"], "/work/soup41_42/head yet"),
    ([*RUN24, "--lm-head-basis", "-1", "train"], "--lm-head-basis takes a number >= 0 (0: off); got '-1'"),
    ([*RUN24, "--replay", "22;23", "train"], "--replay takes run numbers, comma-separated (29,30); got '22;23'"),
    ([*RUN24, "--replay", "22", "train"], "/work/run22 has no responses (run its data stage first)"),
    ([*RUN24, "--max-steps", "0", "train"], "--max-steps takes a whole number >= 1; got '0'"),
])
def test_bad_arguments_are_named_and_nothing_runs(project, args, message):
    done = run(project, *args)
    assert done.returncode == 2 and message in done.stderr and "Usage" in done.stderr
    assert calls(project) == []


def test_train_continues_the_previous_head_with_the_runs_seed(project):
    assert run(project, *RUN24, "train").returncode == 0
    [train] = calls(project)
    assert train.startswith("tools/train_draft.py") and "--init-head head" in train and "--seed 23" in train
    assert f"--work-dir {project}/work/run24 --output {project}/work/run24/head" in train
    assert "--ttt-steps 7" in train and "--lr 2.5e-4" in train and "--until" not in train
    assert (project / "docs" / "results" / "draft_head_report_run24.json").is_file()


def test_an_earlier_runs_learning_rate_can_be_named(project):
    assert run(project, *RUN24, "--lr", "5e-4", "train").returncode == 0
    [train] = calls(project)
    assert "--lr 5e-4" in train and "2.5e-4" not in train


def test_the_lm_head_basis_is_on_at_24_unless_turned_off_with_0(project):
    assert run(project, *RUN24, "train").returncode == 0
    assert run(project, *RUN24, "--lm-head-basis", "8.5", "train").returncode == 0
    assert run(project, *RUN24, "--lm-head-basis", "0", "train").returncode == 0
    default, scaled, plain = calls(project)
    assert " --lm-head-basis 24 " in f"{default} " and " --lm-head-basis 8.5 " in f"{scaled} "
    assert "--lm-head-basis" not in plain


def test_a_replay_arm_trains_on_the_earlier_runs_answers_too_within_its_steps(project):
    for earlier in ("22", "23_lr"):
        (project / "work" / f"run{earlier}" / "responses").mkdir(parents=True)
    assert run(project, *RUN24, "--replay", "22,23_lr", "--max-steps", "378", "train").returncode == 0
    assert run(project, *RUN24, "train").returncode == 0
    replay, plain = calls(project)
    work = project / "work"
    assert (f" --replay-responses {work}/run22/responses --replay-responses {work}/run23_lr/responses "
            in f"{replay} ") and " --max-steps 378 " in f"{replay} "
    assert "--replay-responses" not in plain and "--max-steps" not in plain


def test_bf16_autocast_is_passed_to_training_only_when_asked(project):
    assert run(project, *RUN24, "--bf16-autocast", "train").returncode == 0
    assert run(project, *RUN24, "train").returncode == 0
    bf16, plain = calls(project)
    assert " --bf16-autocast " in f"{bf16} " and "--bf16-autocast" not in plain


def test_skip_eval_stops_training_at_the_exported_head(project):
    assert run(project, *RUN24, "--skip-eval", "train").returncode == 0
    [train] = calls(project)
    assert train.endswith(" --until train")
    assert (project / "docs" / "results" / "draft_head_report_run24.json").is_file()


def test_data_stops_after_the_answers(project):
    assert run(project, *RUN24, "data").returncode == 0
    [data] = calls(project)
    assert "--until responses" in data and "--seed 23" in data and "--init-head" not in data


def test_tau_reuses_the_previous_records_rows_and_judges_against_the_previous_head(project):
    (project / "record").mkdir()
    (project / "record" / "humaneval.json").write_text('"resumed rows"')  # an interrupted tau stage's own rows
    assert run(project, *RUN24, "--baseline-record", "previous", "tau").returncode == 0
    decode_humaneval, summary_humaneval, decode_mt_bench, _ = calls(project)
    head = f"run24={project}/work/run24/head"
    assert decode_humaneval == f"tools/compare_heads.py decode record/humaneval.json humaneval --prompts 0:80 run23=head {head}"
    assert summary_humaneval == "tools/compare_heads.py summary record/humaneval.json --baseline run23"
    assert decode_mt_bench.startswith("tools/compare_heads.py decode record/mt_bench.json mt_bench")
    assert (project / "record" / "mt_bench.json").read_text() == '"mt_bench rows"'  # copied, so only run 24 decodes
    assert (project / "record" / "humaneval.json").read_text() == '"resumed rows"'  # kept, not overwritten
    assert (project / "record" / "humaneval_summary.md").is_file()


def test_served_judges_the_first_20_in_the_served_format_reusing_the_previous_records_rows(project):
    (project / "previous" / "served_mt_bench.json").write_text('"served mt_bench rows"')
    served = "int4vnni/int8vnni+int8vnni"
    assert run(project, *RUN24, "--baseline-record", "previous", "--served-format", served, "served").returncode == 0
    decode_humaneval, summary_humaneval, decode_mt_bench, summary_mt_bench = calls(project)
    head = f"run24={project}/work/run24/head"
    assert decode_humaneval == ("tools/compare_heads.py decode record/served_humaneval.json humaneval --prompts 0:20 "
                                f"--weight-format {served} run23=head {head}")
    assert decode_mt_bench.startswith("tools/compare_heads.py decode record/served_mt_bench.json mt_bench")
    assert summary_mt_bench == "tools/compare_heads.py summary record/served_mt_bench.json --baseline run23"
    assert (project / "record" / "served_mt_bench.json").read_text() == '"served mt_bench rows"'
    assert not (project / "record" / "served_humaneval.json").exists()  # none to reuse: both heads decode


def test_the_served_stage_joins_the_default_stages_only_with_a_served_format(project):
    assert run(project, *RUN24).returncode == 0
    assert not any("--weight-format" in call for call in calls(project))
    assert run(project, *RUN24, "--served-format", "int8vnni").returncode == 0
    assert calls(project)[-2].endswith(f"--weight-format int8vnni run23=head run24={project}/work/run24/head")


def test_stages_run_in_the_order_given(project):
    assert run(project, *RUN24, "gap", "data").returncode == 0
    gap, data = calls(project)
    assert gap.startswith("tools/draft_gap.py") and f"--head {project}/work/run24/head" in gap
    assert data.startswith("tools/train_draft.py")


def test_an_ab_arm_links_the_runs_data_and_trains_under_its_label(project):
    source = project / "work" / "run24"
    for data in ("self_instruct", "prompts", "responses", "vocab"):
        (source / data).mkdir()
        (source / data / "rows.jsonl").write_text(data)
    (project / "work" / "run24_lr").mkdir()
    (project / "work" / "run24_lr" / "report.json").write_text('"arm"')  # what the stand-in train would leave
    arm = ["--run", "24_lr", "--seed", "23", "--from", "run23=head", "--record", "record", "--data-from", "24"]
    assert run(project, *arm, "train").returncode == 0  # train links first: an arm's data is never regenerated
    [train] = calls(project)
    assert f"--work-dir {project}/work/run24_lr --output {project}/work/run24_lr/head" in train
    for data in ("self_instruct", "prompts", "responses", "vocab"):
        linked = project / "work" / "run24_lr" / data / "rows.jsonl"
        assert linked.read_text() == data and linked.stat().st_ino == (source / data / "rows.jsonl").stat().st_ino
    assert (project / "docs" / "results" / "draft_head_report_run24_lr.json").read_text() == '"arm"'


def test_an_arm_in_another_target_format_shares_the_prompts_and_answers_them_itself(project):
    source = project / "work" / "run24"
    for data in ("self_instruct", "prompts", "responses", "vocab"):
        (source / data).mkdir()
        (source / data / "rows.jsonl").write_text(data)
    arm = ["--run", "24_q", "--seed", "23", "--from", "run23=head", "--record", "record", "--data-from", "24",
           "--target-format", "int4vnni/int8vnni"]
    assert run(project, *arm, "data").returncode == 0
    [data] = calls(project)
    assert "--until responses" in data and "--target-format int4vnni/int8vnni" in data
    assert sorted(p.name for p in (project / "work" / "run24_q").iterdir()) == ["prompts", "self_instruct"]
    assert run(project, *RUN24, "data").returncode == 0
    assert "--target-format fp32" in calls(project)[-1]  # the default: the fp32 target answers


def test_a_finished_head_is_judged_by_the_same_stages_under_its_own_name(project):
    (project / "soup").mkdir()
    (project / "soup" / "config.json").write_text("{}")
    served = "int4vnni/int8vnni+int8vnni"
    soup = ["--head", "soup39_40=soup", "--from", "run23=head", "--record", "record", "--baseline-record", "previous",
            "--served-format", served]
    assert run(project, *soup, "tau", "served", "gap").returncode == 0
    decode_humaneval, _, _, _, served_humaneval, _, _, _, gap = calls(project)
    assert decode_humaneval == "tools/compare_heads.py decode record/humaneval.json humaneval --prompts 0:80 run23=head soup39_40=soup"
    assert served_humaneval.endswith(f"--weight-format {served} run23=head soup39_40=soup")
    assert (project / "record" / "mt_bench.json").read_text() == '"mt_bench rows"'  # the baseline's rows, reused
    assert gap.startswith("tools/draft_gap.py --head soup ") and "--json record/gap_soup39_40.json" in gap


def a_head(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")


def test_a_soup_averages_its_runs_then_is_judged_under_its_own_name(project):
    for made in ("run41", "run42", "soup41_42"):  # the soup's as the stand-in average_heads.py cannot make it
        a_head(project / "work" / made / "head")
    assert run(project, "--soup", "41,42", "--from", "run23=head", "--record", "record").returncode == 0
    soup, decode_humaneval, _, _, _ = calls(project)  # the default stages: soup, tau
    work = project / "work"
    assert soup == f"tools/average_heads.py --output {work}/soup41_42/head {work}/run41/head {work}/run42/head"
    assert decode_humaneval.endswith(f"run23=head soup41_42={work}/soup41_42/head")


def test_eval_gives_a_finished_head_the_eval_stages_report_under_its_name(project):
    a_head(project / "soup")
    assert run(project, "--head", "soup39_40=soup", "--from", "run23=head", "--record", "record", "eval").returncode == 0
    assert calls(project) == ["tools/compare_heads.py eval docs/results/draft_head_report_soup39_40.json soup"]
