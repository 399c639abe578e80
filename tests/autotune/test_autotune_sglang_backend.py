"""``cast-autotune profile --backend sglang`` on CPU: the refusal before anything
loads, the shared grid/row/storage path driven through a timer injected at the
seam, backends kept apart in the database, and ``tune --backend``."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli, profiler
from autotune.commands import profile as profile_command
from autotune.commands import tune as tune_command
from autotune.costs import measured_costs
from autotune.errors import AutotuneError
from autotune.grid import ProfileGrid
from autotune.sglang_backend import SGLANG, check_sglang_backend, sglang_on_cpu, sglang_setup
from autotune.store import Setup, Store, TimedStep
from sglang_cast.engine.timing import Timing, summarise
from support.autotune import llama_dirs

GRID = ProfileGrid(batch_sizes=(1, 2), ctx_bucket=32, ctx_buckets=2, max_n=8, draft_max_n=4, n_mode=(1, 2, 4),
                   warmup=1, repeats=2)


class CostCurveTimer:
    """A RoleTimer whose forward costs ``base + B·c/1000 + n`` ms, logging every call
    (which role, point and warm-up/repeat counts the shared scheduler asked for)."""

    def __init__(self, role: str, base: float, calls: list) -> None:
        self.role, self.base, self.calls = role, base, calls

    def time(self, batch_size: int, context_len: int, n: int, warmup: int, repeats: int) -> Timing:
        self.calls.append((self.role, batch_size, context_len, n, warmup, repeats))
        return summarise([self.base + batch_size * context_len / 1000 + n] * repeats)


def curve_timers(calls: list, factory_calls: list | None = None, target_base: float = 10.0):
    def timers(role: str, max_batch: int, capacity: int):
        if factory_calls is not None:
            factory_calls.append((role, max_batch, capacity))
        return CostCurveTimer(role, target_base if role == "target" else 1.0, calls)
    return timers


def sglang_setup_for(device: str = "NVIDIA H100 80GB HBM3") -> Setup:
    return Setup.current(device, "/models/llama", "/models/head#sha256:0", "bfloat16", backend=SGLANG)


# ------------------------------------------------------------- the refusal
def test_without_cuda_the_sglang_backend_runs_sglangs_cpu_engine_on_one_rank(tmp_path):
    target, head = llama_dirs(tmp_path)
    for device, cuda in ((None, False), ("cpu", True)):
        assert sglang_on_cpu(device, cuda)
        assert check_sglang_backend(target, head, device, cuda).model_path == target
        with pytest.raises(AutotuneError, match=r"--tp-size 2: SGLang's CPU engine runs one rank here \(accepted "
                                                r"without a CUDA GPU: 1\)"):
            check_sglang_backend(target, head, device, cuda, tp_size=2, gpu_count=8)
    assert not sglang_on_cpu("cuda", True) and not sglang_on_cpu(None, True)


PROFILE_WITHOUT_CUDA = (
    "import sys, torch; torch.cuda.is_available = lambda: False; import autotune.models as models; "
    "models.load_model_pair = lambda *a, **k: sys.exit('a model was loaded'); "
    "import sglang_cast.sglang_plugin.launch as launch; "
    "launch.sglang_runtime_problem = lambda: \"ModuleNotFoundError: No module named 'uvloop'\"; "
    "from autotune.cli import main; status = main(sys.argv[1:]); "
    "print([m for m in sys.modules if m == 'sglang' or m.startswith('sglang.')], file=sys.stderr); "
    "sys.exit(status)")


@pytest.mark.parametrize("has_configs, code, message", [
    (False, 2, r"--model-path: .* is not a model directory with a config.json"),
    (True, 1, r"--backend sglang: SGLang 0.5.23's runtime does not import in this Python \(ModuleNotFoundError: No "
              r"module named 'uvloop'\); run cast-autotune with .venv-sglang/bin/python"),
])
def test_the_cli_refuses_in_one_line_without_loading_models_or_sglang(tmp_path, has_configs, code, message):
    target, head = llama_dirs(tmp_path) if has_configs else (str(tmp_path), str(tmp_path))
    run = subprocess.run([sys.executable, "-c", PROFILE_WITHOUT_CUDA, "profile", "--gpu", "cpu", "--force-label",
                          "--backend", "sglang", "--model-path", target, "--draft-path", head,
                          "--db", str(tmp_path / "a.db")], capture_output=True, text=True, timeout=300)
    assert run.returncode == code, run.stderr
    error, loaded = run.stderr.strip().splitlines()
    assert re.fullmatch(f"cast-autotune profile: error: {message}.*", error), error
    assert loaded == "[]"  # SGLang was never imported (and no model loaded: that would have exited)
    assert not (tmp_path / "a.db").exists()  # refused before the database was opened


@pytest.mark.parametrize("heads, kv_heads, tp_size, gpus, message", [
    (32, 8, 4, 2, r"--tp-size 4: every rank runs on its own GPU of this machine and 2 are visible"),
    (32, 8, 3, 8, r"--tp-size 3: --model-path .*target: 32 attention heads do not divide over 3 GPUs "
                  r"\(SGLang shards attention by heads, srt/models/llama.py:183-193\)"),
    (32, 6, 4, 4, r"--tp-size 4: --model-path .*: 6 KV heads neither divide over 4 GPUs nor replicate evenly"),
])
def test_a_tp_size_sglang_cannot_shard_or_this_machine_cannot_host_is_refused(tmp_path, heads, kv_heads, tp_size,
                                                                             gpus, message):
    target, head = llama_dirs(tmp_path, heads, kv_heads)
    with pytest.raises(AutotuneError, match=message):
        check_sglang_backend(target, head, "cuda", True, tp_size=tp_size, gpu_count=gpus)


def test_a_tp_size_that_shards_both_models_passes_and_keys_the_rows(tmp_path):
    target, head = llama_dirs(tmp_path, heads=32, kv_heads=2)  # 2 KV heads replicate over 4 GPUs (4 % 2 == 0)
    models = check_sglang_backend(target, head, "cuda", True, tp_size=4, gpu_count=4)
    assert sglang_setup(models, "NVIDIA H100", "bfloat16", 4).tp_size == 4


@pytest.mark.parametrize("command", ["profile", "tune"])
def test_the_native_engine_refuses_a_tp_size_above_1_in_one_line(command, capsys):
    assert cli.main([command, "--gpu", "cpu", "--tp-size", "2", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"cast-autotune {command}: error: --tp-size: the native engine runs on one device (accepted with --backend "
        "native: 1, got 2); tensor parallelism is SGLang's: pass --backend sglang")


@pytest.mark.parametrize("argv, message", [
    (["--tp-size", "9"], "argument --tp-size: expected an integer in [1, 8], got '9'"),
    (["--tp-size", "0"], "argument --tp-size: expected an integer in [1, 8], got '0'"),
    (["--max-states", "1"], "argument --max-states: expected an integer in [2, 64], got '1'"),
    (["--max-state-memory", "0"], "argument --max-state-memory: expected a number in [0.001, 1], got '0'"),
    (["--state-coverage", "1.5"], "argument --state-coverage: expected a number in [0.5, 1], got '1.5'"),
    (["--gpu-memory-gb", "0.5"], "argument --gpu-memory-gb: expected a number in [1, 4096], got '0.5'"),
])
def test_tune_flag_ranges_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["tune", "--gpu", "h100", "--backend", "sglang", *argv])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == f"cast-autotune tune: error: {message} (see --help)"


def test_tune_without_a_gpu_sizes_the_states_for_sglangs_cpu_engine(tmp_path):
    """No graphs and no attention workspace per state there: only the count and the
    coverage bind; with --gpu-memory-gb the states are sized for that GPU instead."""
    target, head = llama_dirs(tmp_path)
    argv = ["tune", "--gpu", "cpu", "--backend", SGLANG, "--model-path", target, "--draft-path", head]
    cpu = tune_command.state_sizing(cli.build_parser().parse_args(argv), "cpu")
    assert cpu.state_bytes(3, 8) == 0 and cpu.captures_per_state == 0 and "SGLang's CPU engine" in cpu.described
    gpu = tune_command.state_sizing(cli.build_parser().parse_args([*argv, "--gpu-memory-gb", "80"]), "cpu")
    assert gpu.state_bytes(3, 8) > 0 and gpu.gpu_bytes == 80 * 1024 ** 3


@pytest.mark.parametrize("model, draft, message", [
    (None, "head", "--model-path: required with --backend sglang"),
    ("model", None, "--draft-path: required with --backend sglang"),
    ("missing", "head", "--model-path: .*missing is not a model directory with a config.json"),
    ("model", "missing", "--draft-path: .*missing is not a model directory with a config.json"),
])
def test_the_sglang_backend_needs_both_model_directories(tmp_path, model, draft, message):
    for name in ("model", "head"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    with pytest.raises(AutotuneError, match=message):
        check_sglang_backend(model and str(tmp_path / model), draft and str(tmp_path / draft), None, True)


def test_sglang_rows_are_keyed_like_the_native_pair_loader_keys_the_same_paths(tmp_path, monkeypatch):
    """`tune --backend sglang` loads the pair natively and looks rows up by its ids."""
    import types

    from autotune import models as model_loading

    for name in ("model", "head"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"name": name}))
    (tmp_path / "head" / "model.safetensors").write_bytes(b"head weights")
    monkeypatch.setattr(model_loading, "load_models",
                        lambda *args: types.SimpleNamespace(target=None, tokenizer=None, eos_token_ids=()))
    monkeypatch.setattr(model_loading, "load_head", lambda *args: None)
    monkeypatch.chdir(tmp_path)  # relative paths resolve the same way in both
    pair = model_loading.load_model_pair("model", "head", "cpu", "bfloat16")
    models = check_sglang_backend("model", "head", "cuda", True)
    assert (models.target_id, models.draft_id) == (pair.target_id, pair.draft_id)
    setup = sglang_setup(models, "NVIDIA H100", "bfloat16")
    assert setup.backend == SGLANG and setup.target_model == pair.target_id


def test_backend_is_a_choice_of_profile_and_tune_and_defaults_to_native():
    parser = cli.build_parser()
    assert parser.parse_args(["profile", "--gpu", "cpu"]).backend == "native"
    assert parser.parse_args(["tune", "--gpu", "cpu", "--backend", "sglang"]).backend == "sglang"
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["profile", "--gpu", "cpu", "--backend", "vllm"])
    assert exit_info.value.code == 2


# ------------------------------------------- the shared grid/row/storage path
def test_an_injected_timer_is_driven_row_by_row_round_robin_and_stored(tmp_path):
    store, calls, factories = Store(tmp_path / "a.db"), [], []
    report = profiler.profile_grid(curve_timers(calls, factories), store, sglang_setup_for(), GRID, progress=False)
    assert (report.measured, report.skipped) == (len(GRID.points()), 0)
    # One timer per role, sized for the role's largest batch and context + n.
    assert factories == [("target", 2, 64 + 8), ("draft", 2, 64 + 4)]
    process_warmup, *timed = calls
    assert process_warmup == ("target", 1, 32, 1, profiler.PROCESS_WARMUP, 1)
    # The first row (target, B=1, c=32): warm-up round, then two timed rounds, each over every n.
    first_row = [(r, b, c, n) for r, b, c, n, _, _ in timed[: 3 * len(GRID.n_values("target"))]]
    assert first_row == [("target", 1, 32, n) for n in GRID.n_values("target")] * 3
    # Besides one process warm-up per role, every call is one untimed-free sample of one point.
    warmups = [(role, b, c, n) for role, b, c, n, w, _ in calls if w == profiler.PROCESS_WARMUP]
    assert warmups == [("target", 1, 32, 1), ("draft", 1, 32, 1)]
    assert sum(1 for *_, w, r in calls if (w, r) == (0, 1)) == len(calls) - 2
    assert len(calls) - 2 == len(GRID.points()) * (GRID.warmup + GRID.repeats)
    rows = {(m.role, m.batch_size, m.context_len, m.n): m for m in store.measurements(sglang_setup_for())}
    assert len(rows) == len(GRID.points()) and {m.backend for m in rows.values()} == {SGLANG}
    assert rows[("target", 2, 64, 8)].median_ms == pytest.approx(10 + 2 * 64 / 1000 + 8)
    assert rows[("draft", 1, 32, 4)].repeats == GRID.repeats


def test_an_interrupted_sglang_profile_resumes_with_the_missing_rows_only(tmp_path):
    store, calls = Store(tmp_path / "a.db"), []
    rows_seen = iter(range(10**6))
    first = profiler.profile_grid(curve_timers(calls), store, sglang_setup_for(), GRID, progress=False,
                                  should_stop=lambda: next(rows_seen) >= 2)
    assert first.measured == 2 * len(GRID.n_values("target"))
    calls.clear()
    second = profiler.profile_grid(curve_timers(calls), store, sglang_setup_for(), GRID, progress=False)
    assert (second.measured, second.skipped) == (len(GRID.points()) - first.measured, first.measured)
    assert ("target", 1, 32) not in {(r, b, c) for r, b, c, *_ in calls[1:]}


def test_native_and_sglang_curves_never_mix_and_tables_come_from_the_backend_named(tmp_path):
    store = Store(tmp_path / "a.db")
    native = Setup.current("NVIDIA H100 80GB HBM3", "/models/llama", "/models/head#sha256:0", "bfloat16")
    profiler.profile_grid(curve_timers([], target_base=10.0), store, native, GRID, progress=False)
    # The same pair, device, dtype and software: only the backend differs.
    sglang = Setup(**{**native.columns(), "backend": SGLANG})
    assert profiler.pending_points(store, sglang, GRID, None) == GRID.points()
    profiler.profile_grid(curve_timers([], target_base=3.0), store, sglang, GRID, progress=False)
    assert {s.backend for s in store.setups()} == {"native", SGLANG}
    native_costs, sglang_costs = measured_costs(store, native).costs, measured_costs(store, sglang).costs
    for batch, context, n in ((1, 32, 1), (2, 64, 8), (2, 40, 5)):  # the timers differ by 7 ms in the target only
        assert native_costs.target(batch, context, n) - sglang_costs.target(batch, context, n) == pytest.approx(7.0)
        assert native_costs.draft(batch, context, 2) == pytest.approx(sglang_costs.draft(batch, context, 2))


def test_tune_builds_its_setup_and_state_sizing_for_the_backend_it_is_given(monkeypatch, tmp_path):
    captured = {}
    monkeypatch.setattr(tune_command, "resolve_device", lambda args: "cpu")
    monkeypatch.setattr(tune_command, "checked_label", lambda args, device: args.label)
    monkeypatch.setattr(tune_command, "open_store", lambda args: None)
    monkeypatch.setattr(tune_command, "load_pair", lambda args, device, weight_format="fp32": type("Pair", (), dict(
        target_id="t", draft_id="d", dtype="float32"))())
    import autotune.workflow as workflow

    def tune_and_publish(pair, store, setup, config, prompts, **kwargs):
        captured["setup"], captured["config"], captured["gate"] = setup, config, kwargs["sglang_gate"]
        raise AutotuneError("stop here")
    monkeypatch.setattr(workflow, "tune_and_publish", tune_and_publish)
    monkeypatch.setattr(tune_command, "sglang_gate", lambda options, config, prompts: "SGLang's live gate")
    assert cli.main(["tune", "--gpu", "cpu", "--quiet"]) == 2
    assert (captured["setup"].backend, captured["setup"].tp_size, captured["config"].runtime_states) == (
        "native", 1, None)
    assert captured["gate"] is None  # the native engine's live gate
    target, head = llama_dirs(tmp_path)
    assert cli.main(["tune", "--gpu", "cpu", "--backend", SGLANG, "--quiet", "--model-path", target, "--draft-path",
                     head, "--tp-size", "2", "--gpu-memory-gb", "80", "--max-states", "6",
                     "--max-state-memory", "0.05", "--state-coverage", "0.9"]) == 2
    assert (captured["setup"].backend, captured["setup"].tp_size) == (SGLANG, 2)
    assert captured["gate"] == "SGLang's live gate"
    sizing = captured["config"].runtime_states
    assert (sizing.cap.max_states, sizing.cap.max_memory_share, sizing.cap.coverage) == (6, 0.05, 0.9)
    assert sizing.gpu_bytes == 80 * 2**30 and "--tp-size 2" in sizing.described


# ------------------------------------------------------------- old databases
def test_an_old_database_gains_the_backend_column_with_its_rows_marked_native(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the measurements table as it was before backends were recorded
        conn.execute("""CREATE TABLE measurements (id INTEGER PRIMARY KEY, device VARCHAR(200), target_model
            VARCHAR(500), draft_model VARCHAR(500), dtype VARCHAR(20), threads INTEGER, torch_version VARCHAR(50),
            package_version VARCHAR(50), role VARCHAR(10), batch_size INTEGER, context_len INTEGER, n INTEGER,
            median_ms FLOAT, p10_ms FLOAT, p90_ms FLOAT, repeats INTEGER, load_avg FLOAT, created DATETIME)""")
        native = Setup.current("cpu-x", "tiny-target", "tiny-draft", "float32")
        values = [*native.columns().values()][:7]
        conn.execute("INSERT INTO measurements VALUES (1, ?, ?, ?, ?, ?, ?, ?, 'target', 1, 32, 1, 5.0, 4.0, 6.0, 3, "
                     "0.1, '2026-01-01 00:00:00.000000')", values)
    store = Store(path)
    rows = store.measurements(native)
    assert [(r.backend, r.median_ms) for r in rows] == [("native", 5.0)]
    assert store.measurements(Setup(**{**native.columns(), "backend": SGLANG})) == []
    assert [s.backend for s in store.setups()] == ["native"]
    assert [s.tp_size for s in store.setups()] == [1]  # and on one device
    assert store.measurements(Setup(**{**native.columns(), "tp_size": 2})) == []
    Store(path)  # opening it again changes nothing
    with sqlite3.connect(path) as conn:
        columns = [c[1] for c in conn.execute("PRAGMA table_info(measurements)")]
        assert (columns.count("backend"), columns.count("tp_size")) == (1, 1)


def test_step_samples_stored_before_layouts_were_recorded_read_as_one_device(tmp_path):
    path = tmp_path / "a.db"
    setup = Setup.current("cpu-x", "tiny-target", "tiny-draft", "float32")
    Store(path).add_steps(setup, "profile", "plain", [TimedStep(1, 32, 0, 0, 1, 5.0, 4.0)], 0.1)
    with sqlite3.connect(path) as conn:  # as the table was before the column existed
        conn.execute("ALTER TABLE step_samples DROP COLUMN tp_size")
    records = Store(path).step_records(setup)
    assert [(r.tp_size, r.step_ms) for r in records] == [(1, 5.0)]
    assert Store(path).step_records(Setup(**{**setup.columns(), "tp_size": 2})) == []


def test_a_lost_tp_rank_ends_the_profile_in_one_line_keeping_what_was_measured(monkeypatch, tmp_path, capsys):
    """A follower rank that died mid-profile: rank 0 stops before its next forward
    (``RankFollowers.run``) and the CLI says so in one line; committed rows stay."""
    import sglang_cast.hardware as hardware
    from autotune import sglang_backend
    from sglang_cast.sglang_plugin.profile_forwards import RankLost

    class DiesInTheSecondRow(CostCurveTimer):
        def time(self, batch_size, context_len, n, warmup, repeats):
            if len(self.calls) >= 30:  # a process warm-up, then 20 calls per row (5 n, 1 + 3 rounds)
                raise RankLost("tensor-parallel rank processes cast-profile-tp1 (exit code 1) ended")
            return super().time(batch_size, context_len, n, warmup, repeats)

    calls = []
    models = sglang_backend.SGLangModels("/m", "/h", "/models/llama", "/models/head#sha256:0")
    monkeypatch.setattr(sglang_backend, "check_sglang_backend", lambda *args: models)
    monkeypatch.setattr(sglang_backend, "sglang_on_cpu", lambda device, cuda: False)  # as on the H100
    monkeypatch.setattr(sglang_backend, "sglang_timers",
                        lambda models, grid, dtype, tp_size, on_cpu: lambda role, b, c: DiesInTheSecondRow(role, 1.0, calls))
    monkeypatch.setattr(sglang_backend, "in_child_process", in_this_process)
    monkeypatch.setattr(profile_command, "checked_label", lambda args, device: args.label)
    monkeypatch.setattr(hardware, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    status = cli.main(["profile", "--gpu", "h100", "--backend", SGLANG, "--tp-size", "2", "--quick", "--quiet",
                       "--db", str(tmp_path / "a.db")])
    assert status == 1
    assert capsys.readouterr().err.strip() == (
        "cast-autotune profile: error: --tp-size 2: tensor-parallel rank processes cast-profile-tp1 (exit code 1) "
        "ended")
    setup = Setup.current("NVIDIA H100 80GB HBM3", "/models/llama", "/models/head#sha256:0", "float32",
                          backend=SGLANG, tp_size=2)
    rows = Store(tmp_path / "a.db").measurements(setup)
    assert {(m.role, m.batch_size) for m in rows} == {("target", 1)} and len(rows) == 5  # the row done before


def test_tune_on_sglang_rows_loads_no_model_and_gates_on_sglangs_engines(monkeypatch, tmp_path):
    """The pair is its ids (those `profile --backend sglang` and `collect` key rows and
    traces by), with or without the live gate: the gate runs SGLang's engines, never
    the native one (`--confirm-prompts 0` builds none)."""
    from autotune.models import draft_model_id, target_model_id

    captured, loaded = {}, []
    monkeypatch.setattr(tune_command, "resolve_device", lambda args: "cpu")
    monkeypatch.setattr(tune_command, "checked_label", lambda args, device: args.label)
    monkeypatch.setattr(tune_command, "open_store", lambda args: None)
    monkeypatch.setattr(tune_command, "load_pair", lambda args, device, weight_format="fp32": loaded.append(device) or type(
        "Pair", (), dict(target_id="t", draft_id="d", dtype="float32"))())
    import autotune.workflow as workflow

    def tune_and_publish(pair, store, setup, config, prompts, **kwargs):
        captured["pair"], captured["setup"], captured["gate"] = pair, setup, kwargs["sglang_gate"]
        raise AutotuneError("stop here")
    monkeypatch.setattr(workflow, "tune_and_publish", tune_and_publish)
    gates = []
    monkeypatch.setattr(tune_command, "sglang_gate", lambda options, config, prompts: gates.append(
        config.confirm_prompts) or "SGLang's live gate")
    target, head = llama_dirs(tmp_path)
    argv = ["tune", "--gpu", "h100", "--backend", SGLANG, "--quiet", "--model-path", target, "--draft-path", head,
            "--gpu-memory-gb", "80", "--dtype", "bfloat16"]
    assert cli.main([*argv, "--confirm-prompts", "0"]) == 2
    pair = captured["pair"]
    assert loaded == [] and (pair.target_id, pair.draft_id) == (target_model_id(target), draft_model_id(Path(head)))
    assert gates == [] and captured["gate"] is None
    assert (pair.dtype, pair.device.type, pair.random_draft) == ("bfloat16", "cpu", False)
    assert (captured["setup"].target_model, captured["setup"].dtype) == (pair.target_id, "bfloat16")
    assert cli.main([*argv, "--confirm-prompts", "1"]) == 2
    assert loaded == [] and captured["pair"] == pair
    assert gates == [1] and captured["gate"] == "SGLang's live gate"


# ------------------------------------------- whole SGLang iterations (item 4)
def in_this_process(target, *args, what: str) -> None:
    """``sglang_backend.in_child_process`` without the child: a monkeypatch made here
    does not reach a spawned process."""
    target(*args)


def test_a_child_process_error_is_the_parents_one_line_error():
    from autotune.sglang_backend import in_child_process
    from support.children import crashes, fails_with_an_autotune_error

    with pytest.raises(AutotuneError, match="^--tp-size 2: rank lost$") as err:
        in_child_process(fails_with_an_autotune_error, "--tp-size 2: rank lost", what="SGLang's forwards")
    assert err.value.exit_code == 1
    with pytest.raises(AutotuneError, match="SGLang's forwards: the process timing them ended with exit code 3"):
        in_child_process(crashes, what="SGLang's forwards")


def test_a_step_design_run_without_a_timed_verify_is_refused_by_name():
    """The run's speed comes from the worker's timed verify forwards; a run that logged
    none (a worker without the wrap) cannot be set at its tables' speed: one line, no fit."""
    from types import SimpleNamespace

    from autotune.sglang_backend import SGLangDesignTimer
    from sglang_cast.sglang_plugin.step_log import LoggedStep

    untimed = [LoggedStep(2, 40, 0, 0, 2, 12.0, 11.0)] * 3

    class Logged:
        def time(self, shape, texts, new_tokens, warmup, steps):
            return untimed

    with pytest.raises(AutotuneError, match="^SGLang's step design at B=2: the worker logged no timed verify"):
        SGLangDesignTimer(Logged()).time(2, None, ["a", "b"], 4, SimpleNamespace(warmup=0, steps=3))


@pytest.mark.parametrize("speed", [1.0, 1.25])
def test_profile_sglang_times_whole_iterations_and_the_setups_overhead_is_what_they_planted(monkeypatch, tmp_path,
                                                                                          capsys, speed):
    """``profile --backend sglang``: SGLang's forwards first, then the step design
    through SGLang engines running the CAST worker (stand-ins here: the plugin's own
    decider, drafting and step log, a clock advanced by the iteration's forwards plus
    planted host terms).  The setup's overhead table is fitted from those steps, so
    ``tune --backend sglang`` charges the planted terms — also on a machine running
    ``speed`` times slower than its tables (the worker's timed verify reads it)."""
    import sglang_cast.hardware as hardware
    from autotune import sglang_backend
    from support.plugin import PLANTED, StandInFactory

    calls, factory = [], StandInFactory(speed)
    models = sglang_backend.SGLangModels("/m", "/h", "/models/llama", "/models/head#sha256:0")
    real_step_timer = sglang_backend.sglang_step_timer
    monkeypatch.setattr(sglang_backend, "check_sglang_backend", lambda *args: models)
    monkeypatch.setattr(sglang_backend, "sglang_on_cpu", lambda device, cuda: False)  # as on the H100
    monkeypatch.setattr(sglang_backend, "sglang_timers", lambda *args: curve_timers(calls))
    monkeypatch.setattr(sglang_backend, "in_child_process", in_this_process)
    monkeypatch.setattr(sglang_backend, "sglang_step_timer",
                        lambda *args: real_step_timer(*args, engine_factory=factory))
    monkeypatch.setattr(profile_command, "checked_label", lambda args, device: args.label)
    monkeypatch.setattr(hardware, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    status = cli.main(["profile", "--gpu", "h100", "--backend", SGLANG, "--quick", "--quiet", "--overhead-steps", "3",
                       "--overhead-warmup", "1", "--db", str(tmp_path / "a.db")])
    assert status == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "host overhead: 26 runs of whole steps timed" in out  # plain + 12 trees, at B = 1 and 2
    assert len(factory.engines) == 13 and all(e.shut for e in factory.engines)
    setup = Setup.current("NVIDIA H100 80GB HBM3", "/models/llama", "/models/head#sha256:0", "float32",
                          backend=SGLANG)
    store = Store(tmp_path / "a.db")
    assert len(store.step_records(setup)) == 26 * 3
    overhead = measured_costs(store, setup).costs.overhead
    for batch in (1, 2):
        terms = overhead.terms(batch, 200)
        assert [terms.plain, terms.spec_base, terms.per_layer, terms.per_token] == pytest.approx(
            [PLANTED.plain, PLANTED.spec_base, PLANTED.per_layer, PLANTED.per_token], abs=1e-6)


def test_a_published_profile_names_models_by_what_another_clone_can_resolve(tmp_path, monkeypatch):
    """No checkout or home folder of the tuning machine in a profile (issue 47): the
    shipped head relative to the package's parent, the project cache by its variable."""
    from autotune.models import PACKAGE_ROOT, portable_ref

    monkeypatch.setenv("SGLANG_CAST_CACHE", str(tmp_path / "cache"))
    head = PACKAGE_ROOT / "assets" / "smollm2-135m-eagle"
    assert portable_ref(f"{head}#sha256:abc") == "sglang_cast/assets/smollm2-135m-eagle#sha256:abc"
    assert portable_ref(str(tmp_path / "cache" / "models" / "M")) == "$SGLANG_CAST_CACHE/models/M"
    assert portable_ref(str(tmp_path / "cache" / "models" / "M") + "@int4") == "$SGLANG_CAST_CACHE/models/M@int4"
    assert portable_ref("/models/llama") == "/models/llama"  # a user's own path stays as given
    assert portable_ref("embedded:SmolLM2-135M-Instruct@int4/int8") == "embedded:SmolLM2-135M-Instruct@int4/int8"
    assert not any(str(tmp_path) in line or "/work/" in line or "/root/" in line
                   for path in (PACKAGE_ROOT.parent / "profiles").rglob("*.yaml")
                   for line in path.read_text().splitlines())  # the shipped profiles hold none either
