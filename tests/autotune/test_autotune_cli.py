"""The cast-autotune CLI edge: labels checked against the hardware, one-line
errors for bad flags, help for every flag, analytic profiles, show and plot."""

from argparse import Namespace

import pytest
import torch

from autotune.analytic import GPUS, AnalyticGrid, analytic_profile
from autotune.cli import build_parser, main
from autotune.commands.common import format_name
from autotune.errors import AutotuneError
from autotune.labels import check_label
from autotune.store import Setup, Store
from autotune.tuner import tune_bucket
from sglang_cast.cast import BucketSettings, PolicySettings, Thresholds, TreeShape, make_policy, replay
from sglang_cast.engine.timing import Timing
from sglang_cast.profile import load_profile
from support import ROOT
from support.autotune import CHAIN_GRID, chain_costs, chain_trace

PROFILES = ROOT / "profiles"
SHIPPED_CPU_FORMAT = load_profile(PROFILES / "cpu.yaml").profile.weight_format  # whatever the last tune published


@pytest.mark.parametrize("label, device_type, name", [
    ("h100", "cpu", "Intel(R) Xeon(R) Processor"),
    ("cpu", "cuda", "NVIDIA H100 80GB HBM3"),
    ("h20", "cuda", "NVIDIA H200"),
    ("rtx4090", "cuda", "NVIDIA A800-SXM4-80GB"),
    ("mystery-gpu", "cuda", "NVIDIA H100 80GB HBM3"),
])
def test_a_label_that_does_not_match_the_hardware_is_refused(label, device_type, name):
    with pytest.raises(AutotuneError, match="--force-label"):
        check_label(label, device_type, name, force=False)
    check_label(label, device_type, name, force=True)


@pytest.mark.parametrize("label, device_type, name", [
    ("cpu", "cpu", "AMD EPYC 7B13"), ("h100", "cuda", "NVIDIA H100 80GB HBM3"), ("h20", "cuda", "NVIDIA H20"),
    ("a800", "cuda", "NVIDIA A800-SXM4-80GB"), ("rtx4090", "cuda", "NVIDIA GeForce RTX 4090"),
])
def test_matching_labels_pass(label, device_type, name):
    check_label(label, device_type, name, force=False)


def test_profile_refuses_a_gpu_label_on_this_cpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("needs a CPU-only machine")
    assert main(["profile", "--gpu", "h100", "--db", str(tmp_path / "a.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not match this device (cpu:" in err and "--force-label" in err
    assert not (tmp_path / "a.db").exists()  # refused before touching anything


@pytest.mark.parametrize("argv, expected", [
    (["profile", "--gpu", "cpu", "--max-n", "0"], "argument --max-n: expected an integer in [2, 4096], got '0'"),
    (["profile", "--gpu", "cpu", "--batch-sizes", "4,2"], "argument --batch-sizes: expected increasing"),
    (["tune", "--gpu", "cpu", "--c-range", "5,1"], "argument --c-range: expected increasing"),
    (["tune", "--gpu", "cpu", "--trials", "lots"], "argument --trials: expected an integer in [1, 100000]"),
    (["collect", "--batch-size", "0"], "argument --batch-size: expected increasing comma-separated integers in [1,"),
    (["daemon", "--gpu", "cpu", "--interval", "-3"], "argument --interval: expected a number in [1, 1e+09]"),
    (["tune"], "the following arguments are required: --gpu/--label"),
    (["profile", "--gpu", "cpu", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["profile", "--gpu", "cpu", "--weight-format", "fp32,int3"],
     "argument --weight-format: expected 'auto' or comma-separated formats: 'int3' is not"),
    (["tune", "--gpu", "cpu", "--weight-format", ""], "argument --weight-format: expected 'auto' or comma-separated"),
    (["tune", "--gpu", "cpu", "--live-rounds", "1"], "argument --live-rounds: expected an integer in [2, 100], got '1'"),
    (["tune", "--gpu", "cpu", "--live-margin", "0"], "argument --live-margin: expected a number in [0.001, 10]"),
    (["profile", "--gpu", "cpu", "--overhead-steps", "-1"], "argument --overhead-steps: expected an integer in [0,"),
    (["profile", "--gpu", "cpu", "--overhead-warmup", "x"], "argument --overhead-warmup: expected an integer in [0,"),
])
def test_bad_flags_are_one_line_errors_naming_the_flag(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_weight_formats_auto_is_every_cpu_candidate_and_lists_are_canonical(capsys):
    from autotune.commands.common import formats_for
    from sglang_cast.engine.format_choice import candidates

    parser = build_parser()
    profile = parser.parse_args(["profile", "--gpu", "cpu"])
    assert profile.weight_formats == "auto" and formats_for(profile, "cpu") == candidates()
    assert formats_for(profile, "cuda") == ("fp32",)
    listed = parser.parse_args(["tune", "--gpu", "cpu", "--weight-format", "int4/int8,fp32,int4/int8,int8/int8"])
    assert formats_for(listed, "cpu") == ("int4/int8", "fp32", "int8")
    with pytest.raises(AutotuneError, match="--weight-format: packed formats run on the CPU only"):
        formats_for(listed, "cuda")


def test_tune_without_measurements_of_any_format_says_what_to_profile(tmp_path):
    from autotune.workflow import format_setups

    store = Store(tmp_path / "a.db")
    setup = Setup.current("test-cpu", "tiny-target", "tiny-draft", "float32")
    with pytest.raises(AutotuneError) as err:
        format_setups(store, setup, ("fp32", "int8"))
    assert "cast-autotune profile --weight-format fp32,int8" in str(err.value) and "\n" not in str(err.value)


def test_every_flag_of_every_command_has_help():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(commands) == {"profile", "collect", "tune", "daemon", "analytic", "show", "plot", "bench", "preflight"}
    for name, sub in commands.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings} has no help"


def test_shipped_analytic_profiles_load_and_validate():
    for label in ("h100", "a800", "h20", "rtx4090"):
        loaded = load_profile(PROFILES / f"{label}.yaml")
        profile = loaded.profile
        assert (profile.label, profile.source, profile.device) == (label, "analytic", GPUS[label].name)
        assert "max(bytes/BW, flops/FLOPS)" in profile.provenance["formula"]
        assert profile.provenance["gpu"]["memory_bandwidth_tb_s"] == GPUS[label].memory_bandwidth_tb_s
        assert all(b.thresholds == Thresholds(1.0, 1.0, 1.0) for b in profile.settings.buckets)


def test_analytic_roofline_is_flat_until_the_ridge_then_linear():
    costs = analytic_profile("h20", grid=AnalyticGrid(batch_sizes=(1, 64), ctx_buckets=1, max_n=96)).settings.costs
    ridge = 2 * GPUS["h20"].dense_bf16_tflops / (2 * GPUS["h20"].memory_bandwidth_tb_s)  # ~37 tokens
    flat = costs.target(1, 512, int(ridge) // 2) / costs.target(1, 512, 1)
    steep = (costs.target(1, 512, 96) - costs.target(1, 512, 72)) / 24
    assert flat < 1.05 and steep > 0
    # Batch 64 reads 64 contexts of KV (memory-bound at n = 1) but 8 tokens each are already compute-bound.
    assert costs.target(64, 512, 8) > 2 * costs.target(64, 512, 1)


def test_cast_with_default_thresholds_keeps_the_full_top_k_at_batch_1_on_an_analytic_profile():
    """Theorem 4.1 rationale of C = 1: where the draft cost is flat (memory-bound),
    breadth pruning keeps every candidate, i.e. EAGLE-2's top-K."""
    costs = load_profile(PROFILES / "h100.yaml").profile.settings.costs
    shape = TreeShape(top_k=3, max_depth=5, num_verify_tokens=16)
    trace = chain_trace()
    kept = {}
    for policy in ("cast", "eagle2"):
        settings = PolicySettings(buckets=(BucketSettings(1, shape, Thresholds(1.0, 1.0, 1.0)),), costs=costs)
        kept[policy] = replay([trace], make_policy(policy, settings)).outcomes[0].verified
    assert kept["cast"] == kept["eagle2"] == shape.num_verify_tokens - 1


def test_analytic_command_writes_a_valid_profile(tmp_path, capsys):
    assert main(["analytic", "--gpu", "rtx4090", "--output", str(tmp_path / "x.yaml"), "--db",
                 str(tmp_path / "a.db")]) == 0
    assert load_profile(tmp_path / "x.yaml").profile.source == "analytic"
    assert main(["analytic", "--gpu", "tpu-v5", "--output", str(tmp_path / "y.yaml")]) == 2
    assert "analytic profiles exist for a800, h100, h20, h200, rtx4090, got 'tpu-v5'" in capsys.readouterr().err


def test_show_and_plot(tmp_path, capsys):
    db = tmp_path / "a.db"
    store = Store(db)
    setup = Setup.current("test-cpu", "tiny-target", "tiny-draft", "float32")
    for role, base in (("target", 10.0), ("draft", 2.0)):
        for batch in (1, 4):
            for n in (1, 2, 4, 8):
                store.add_measurement(setup, role, batch, 128, n, Timing(base * batch * (1 + 0.1 * n), 0, 0, 3), 0.1)
    tune_bucket(store, "demo-b1", [chain_trace()], chain_costs(), 1, CHAIN_GRID.space(), 3, progress=False)
    assert main(["show", "--db", str(db), "--trials"]) == 0
    out = capsys.readouterr().out
    assert "target f(B, c=128, n) / f(B, c, 1)" in out and "demo-b1" in out and "best so far" in out
    assert main(["plot", "--db", str(db), "--out", str(tmp_path / "plots")]) == 0
    for name in ("cost_curves.png", "tuning_history.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", "--db", str(db), "--out", str(tmp_path / "plots"), "--context", "999"]) == 2
    assert "--context: no measurements at 999" in capsys.readouterr().err


def test_daemon_server_url_flags_build_the_watch_or_a_one_line_error():
    from autotune.commands.daemon import server_watch

    parser = build_parser()
    args = parser.parse_args(["daemon", "--gpu", "cpu", "--server-url", "http://127.0.0.1:30000",
                              "--drift-margin", "0.3", "--server-api-key", "k"])
    watch = server_watch(args)
    assert (watch.url, watch.margin, watch.api_key) == ("http://127.0.0.1:30000", 0.3, "k")
    assert server_watch(parser.parse_args(["daemon", "--gpu", "cpu"])) is None
    with pytest.raises(AutotuneError, match=r"^--server-url: server url must start with http"):
        server_watch(parser.parse_args(["daemon", "--gpu", "cpu", "--server-url", "localhost:30000"]))
    with pytest.raises(AutotuneError, match=r"^--server-api-key: needs --server-url"):
        server_watch(parser.parse_args(["daemon", "--gpu", "cpu", "--server-api-key", "k"]))


def test_a_format_is_named_for_what_runs():
    """The spec ``fp32`` (dense: the model's own weights) of a bfloat16 model runs as
    bf16 (a CUDA profile printed "fp32" for it); packed parts keep their names."""
    assert format_name(Namespace(dtype="bfloat16"), "fp32") == "bf16"
    assert format_name(Namespace(dtype="float32"), "fp32") == "fp32"
    assert format_name(Namespace(dtype="float32"), "int4/int8+int8") == "int4/int8+int8"


@pytest.mark.parametrize("extra, expected", [
    (["--backend", "sglang", "--model-path", "/m", "--draft-path", "/d"], "--calibrate-from: re-tunes for the native"),
    (["--weight-format", "int8"],
     f"--weight-format: --calibrate-from tunes the profile's own format ({SHIPPED_CPU_FORMAT})"),
])
def test_calibrate_from_refuses_what_it_cannot_re_tune_in_one_line(tmp_path, extra, expected, capsys):
    argv = ["tune", "--gpu", "cpu", "--calibrate-from", str(PROFILES / "cpu.yaml"), "--db", str(tmp_path / "a.db")]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_calibrate_from_a_file_that_is_no_profile_names_it(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 1\n")
    assert main(["tune", "--gpu", "cpu", "--calibrate-from", str(bad), "--db", str(tmp_path / "a.db")]) == 2
    err = capsys.readouterr().err
    assert "--calibrate-from:" in err and err.count("\n") == 1


def test_tune_searches_the_lookup_branch_wherever_the_engine_runs_it():
    """The branch's depth is searched up to --max-lookup-depth (default 8): on the native
    engine and on SGLang's CPU engine, not for SGLang on GPUs, whose overlap scheduling
    (on by default) keeps the worker's branch off."""
    from autotune.commands.common import tune_config
    from autotune.commands.tune import TuneOptions
    from autotune.sglang_backend import RuntimeStateSizing
    from sglang_cast.sglang_plugin.state_cover import StateCap

    parser = build_parser()

    def space(*flags: str, branch_runs: bool | None = None):
        options = TuneOptions.from_args(parser.parse_args(["tune", "--gpu", "cpu", *flags]))
        sizing = None if branch_runs is None else RuntimeStateSizing(lambda d, w: 0, 1 << 30, StateCap(), 0, "test",
                                                                      branch_runs=branch_runs)
        return tune_config(options, "cpu", runtime_states=sizing, backend=options.backend).space

    assert space().lookup_depth == 8
    assert space("--max-lookup-depth", "3").lookup_depth == 3
    assert space("--backend", "sglang", branch_runs=True).lookup_depth == 8  # SGLang's CPU engine
    assert space("--backend", "sglang", branch_runs=False).lookup_depth == 0  # SGLang on GPUs
    with pytest.raises(SystemExit):
        parser.parse_args(["tune", "--gpu", "cpu", "--max-lookup-depth", "33"])


@pytest.mark.parametrize("content", [None, "schema: 1\n"])
def test_an_incumbent_that_is_no_profile_is_named_before_anything_loads(tmp_path, content, capsys):
    incumbent = tmp_path / "old.yaml"
    if content is not None:
        incumbent.write_text(content)
    assert main(["tune", "--gpu", "cpu", "--incumbent", str(incumbent), "--db", str(tmp_path / "a.db")]) == 2
    err = capsys.readouterr().err
    assert "error: --incumbent: " in err and str(incumbent) in err and err.count("\n") == 1


@pytest.mark.parametrize("margin", ["-0.01", "1.5", "many"])
def test_an_incumbent_margin_outside_0_to_1_is_named_in_one_line(tmp_path, margin, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["tune", "--gpu", "cpu", "--incumbent-margin", margin, "--db", str(tmp_path / "a.db")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--incumbent-margin: expected a number in [0, 1]" in err
    assert err.count("\n") == 1
