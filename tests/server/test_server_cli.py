"""The launch command line: --help, the SGLang backend's checks, and
one-line errors (exit code 2, no traceback) for every invalid combination."""

import os
from dataclasses import replace
import subprocess
import sys

import pytest

from sglang_cast import launch_server
from sglang_cast.server import launch_args
from sglang_cast.server.config import ShapeOverride
from sglang_cast.hardware import hardware_label
from sglang_cast.server.launch_args import parse_launch_args


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "sglang_cast.launch_server", *args], capture_output=True,
                          text=True, timeout=120)


def test_flags_are_parsed_and_refused_without_loading_torch():
    """The launcher answers a bad flag in a second: nothing it imports to parse them,
    the profile label's lookup included, loads torch."""
    code = ("import sys\n"
            "from sglang_cast import launch_server\n"
            "from sglang_cast.hardware import hardware_label\n"
            "from sglang_cast.server.launch_args import parse_launch_args\n"
            "assert hardware_label('cpu') == 'cpu'\n"
            "try:\n    parse_launch_args(['--port', '0'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_explains_every_flag():
    result = run_cli("--help")
    assert result.returncode == 0
    for flag in ("--model-path", "--speculative-draft-model-path", "--speculative-algorithm",
                 "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--cast-profile", "--host", "--port", "--max-running-requests", "--max-queued-requests",
                 "--context-length", "--api-key", "--device", "--backend", "--served-model-name", "--log-level",
                 "--admin-api-key", "--max-request-bytes", "--max-logprobs", "--mem-fraction-static", "--weight-format",
                 "--compile"):
        assert flag in result.stdout
    assert "NONE,EAGLE,CAST,GOODPUT" in result.stdout


def test_a_profile_tuned_with_another_head_is_named_when_the_server_loads_it(tmp_path, caplog):
    """A head retrained in place keeps its path: the profile's recorded digest is what
    tells the server its trees were tuned on another head's acceptance."""
    from sglang_cast.engine.build import default_draft_path
    from sglang_cast.models.digest import weights_digest
    from sglang_cast.profile import PROFILE_DIR, load_profile, save_profile

    shipped = load_profile(PROFILE_DIR / "cpu.yaml").profile
    served = weights_digest(default_draft_path(None))
    cases = ((["--speculative-algorithm", "CAST"], "sha256:000000000000", True),
             (["--speculative-algorithm", "CAST"], served, False),
             (["--speculative-algorithm", "NONE"], "sha256:000000000000", False))  # plain decoding drafts nothing
    for argv, recorded, noted in cases:
        profile = replace(shipped, model={**shipped.model, "draft": f"sglang_cast/assets/smollm2-135m-eagle#{recorded}"})
        path = save_profile(profile, tmp_path / "p.yaml")
        caplog.clear()
        with caplog.at_level("WARNING"):
            launch_server.resolve_profile(parse_launch_args([*argv, "--cast-profile", str(path)]),
                                          launch_args.build_parser())
        lines = [r.getMessage() for r in caplog.records if "draft head" in r.getMessage()]
        assert bool(lines) is noted, (argv, recorded, lines)
        if noted:
            assert recorded in lines[0] and served in lines[0] and str(path) in lines[0] and "cast-autotune" in lines[0]


@pytest.mark.parametrize("argv,message", [
    (["--backend", "sglang", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"], "give all of"),
    (["--backend", "sglang", "--device", "cuda", "--model-path", "m", "--speculative-algorithm", "CAST"],
     "needs --speculative-draft-model-path"),
])
def test_sglang_backend_checks_flags_before_any_model_loads(argv, message):
    result = run_cli(*argv)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert message in result.stderr


def test_sglang_backend_outside_sglangs_venv_is_one_line_before_any_model_work(tmp_path):
    """This venv has SGLang's frontend, not its server runtime (.venv-sglang has): the launch
    says so in one line, before converting the embedded model."""
    import importlib.util

    if importlib.util.find_spec("uvloop") is not None:
        pytest.skip("SGLang's server runtime may import here")
    result = subprocess.run([sys.executable, "-m", "sglang_cast.launch_server", "--backend", "sglang",
                             "--speculative-algorithm", "NONE"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "SGLANG_CAST_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "SGLang 0.5.23's server does not import in this Python" in result.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("argv,message", [
    (["--speculative-algorithm", "NONE", "--speculative-num-steps", "3"], "cannot be used with"),
    (["--speculative-algorithm", "NONE", "--speculative-draft-model-path", "x"], "cannot be used with"),
    (["--speculative-num-draft-tokens", "1"], "must be >= 2"),
    (["--speculative-eagle-topk", "0"], "expected an integer >= 1, got '0'"),
    (["--speculative-algorithm", "MEDUSA"], "invalid choice"),
    (["--port", "0"], "expected an integer in [1, 65535], got '0'"),
    (["--port", "70000"], "[1, 65535]"),
    (["--port", "http"], "expected an integer"),
    (["--max-running-requests", "0"], "expected an integer >= 1, got '0'"),
    (["--max-queued-requests", "-1"], "expected an integer >= 0, got '-1'"),
    (["--max-request-bytes", "0"], "expected an integer >= 1, got '0'"),
    (["--max-logprobs", "-1"], "expected an integer >= 0, got '-1'"),
    (["--mem-fraction-static", "1.5", "--backend", "sglang"], "expected a number in (0, 1), got '1.5'"),
    (["--mem-fraction-static", "0.5"], "--mem-fraction-static applies to --backend sglang only"),
    (["--weight-format", "int3"], "'int3' is not '<linears>' or '<linears>/<lm_head>', either optionally followed by "
                                  "':dense<N>[:bf16]' and then by '+<draft>[:dense<N>[:bf16]]', with each one of "
                                  "fp32, bf16"),
    (["--weight-format", "int4:dense8:int8"], "the dense side after ':dense8:' must be one of fp32, bf16, got 'int8'"),
    (["--weight-format", "int4:dense0"], "the rows after ':dense' must be an integer in [1, 1048576], got '0'"),
    (["--weight-format", "int4", "--backend", "sglang"], "--weight-format applies to the native engine only"),
    (["--compile", "yes"], "--compile: expected one of auto, on, off, got 'yes'"),
    (["--compile", "on", "--backend", "sglang"], "--compile applies to the native engine only"),
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
    (["--log-level", "loud"], "invalid choice"),
    (["--cast-live-gate", "maybe"], "--cast-live-gate: invalid choice: 'maybe' (choose from 'on', 'off')"),
    (["--cast-live-gate", "off", "--backend", "sglang"], "--cast-live-gate applies to the native engine only"),
    (["--cast-lookup-depth", "8", "--backend", "sglang"], "--cast-lookup-depth applies to the native engine only"),
    (["--cast-lookup-depth", "8", "--speculative-algorithm", "NONE"], "--cast-lookup-depth cannot be used with"),
    (["--cast-lookup-depth", "-1"], "--cast-lookup-depth"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_invalid_arguments_are_one_line_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_launch_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_algorithms_and_shape_flags():
    args = parse_launch_args(["--speculative-algorithm", "eagle", "--speculative-num-steps", "4",
                              "--speculative-num-draft-tokens", "16"])
    assert args.policy == "eagle2"
    assert args.shape == ShapeOverride(max_depth=4, top_k=None, num_verify_tokens=16)
    assert {name: parse_launch_args(["--speculative-algorithm", name]).policy
            for name in ("NONE", "EAGLE", "CAST", "GOODPUT")} == \
        {"NONE": "vanilla", "EAGLE": "eagle2", "CAST": "cast", "GOODPUT": "goodput"}
    defaults = parse_launch_args([])
    assert (defaults.policy, defaults.host, defaults.port, defaults.max_running_requests,
            defaults.max_queued_requests, defaults.context_length) == ("cast", "127.0.0.1", 30000, 8, 64, 2048)


def test_cuda_graphs_are_on_unless_disabled():
    assert parse_launch_args([]).cuda_graph is True
    assert parse_launch_args(["--disable-cuda-graph"]).cuda_graph is False


def test_cost_aware_policy_without_profile_says_what_to_do(capsys, monkeypatch):
    monkeypatch.setattr("sglang_cast.profile.find_profile", lambda label: None)
    for algorithm in ("CAST", "GOODPUT"):
        with pytest.raises(SystemExit) as exit_info:
            launch_server.main(["--speculative-algorithm", algorithm])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--cast-profile" in err and "cast-autotune profile" in err
    parser = launch_args.build_parser()
    assert launch_server.resolve_profile(parse_launch_args(["--speculative-algorithm", "EAGLE"]), parser) is None


@pytest.mark.parametrize("argv,message", [
    (["--cast-profile", "/no/such/profile.yaml"], "profile file not found: /no/such/profile.yaml"),
    (["--speculative-algorithm", "NONE", "--model-path", "/no/such/model"], "model path not found"),
])
def test_startup_failures_are_one_line_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        launch_server.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize("name,label", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A800-SXM4-80GB", "a800"), ("NVIDIA H20", "h20"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200"),
    ("NVIDIA B200", "nvidia-b200"),
])
def test_gpu_profile_labels(monkeypatch, name, label):
    monkeypatch.setattr("sglang_cast.hardware.device_name", lambda device: name)
    assert hardware_label("cuda:0") == label
    assert hardware_label("cpu") == "cpu"


def test_limit_and_key_flags_reach_the_app(monkeypatch):
    import uvicorn
    from support.server import tiny_engine

    served = {}
    monkeypatch.setattr("sglang_cast.engine.build_engine", lambda engine_args: tiny_engine("vanilla"))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app))
    launch_server.main(["--speculative-algorithm", "NONE", "--api-key", "u", "--admin-api-key", "a",
                        "--max-request-bytes", "5000", "--max-logprobs", "3"])
    config = served["app"].state.server.config
    assert (config.api_key, config.admin_api_key, config.max_request_bytes, config.max_top_logprobs) == \
        ("u", "a", 5000, 3)
    defaults = parse_launch_args([])
    assert (defaults.admin_api_key, defaults.max_request_bytes, defaults.max_logprobs) == (None, None, 20)


def test_weight_format_auto_is_the_default_and_cast_profile_auto_means_this_hardware():
    defaults = parse_launch_args([])
    assert defaults.weight_format == "auto" and defaults.cast_profile is None
    assert parse_launch_args(["--weight-format", "auto", "--cast-profile", "auto"]).cast_profile is None
    assert parse_launch_args(["--weight-format", "int4/int4"]).weight_format == "int4"
    assert parse_launch_args(["--weight-format", "auto", "--backend", "sglang"]).weight_format == "auto"
    assert parse_launch_args([]).compile == "off"
    assert parse_launch_args(["--compile", "auto"]).compile == "auto"
    help_text = launch_args.build_parser().format_help()
    assert "default: auto" in help_text and "cpu-<ISA class>.yaml" in help_text


def test_the_profile_reaches_the_engine_so_auto_can_use_its_format(monkeypatch, tmp_path):
    import uvicorn
    from support.autotune import profile
    from support.server import tiny_engine

    from sglang_cast.profile import save_profile

    path = save_profile(profile(weight_format="int4/int8"), tmp_path / "p.yaml")
    built = []
    monkeypatch.setattr("sglang_cast.engine.build_engine",
                        lambda engine_args: built.append(engine_args) or tiny_engine("vanilla"))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: None)
    launch_server.main(["--speculative-algorithm", "NONE", "--cast-profile", str(path)])
    assert built[0].weight_format == "auto" and built[0].profile.weight_format == "int4/int8"


def test_cast_live_gate_is_on_by_default_and_help_says_what_off_keeps():
    assert parse_launch_args([]).live_gate is True
    assert parse_launch_args(["--cast-live-gate", "off"]).live_gate is False
    assert parse_launch_args(["--cast-live-gate", "on"]).live_gate is True
    help_text = " ".join(launch_args.build_parser().format_help().split())
    assert "--cast-live-gate {on,off}" in help_text and "measure and export only" in help_text


@pytest.mark.parametrize("flag, switching", [("on", True), ("off", False)])
def test_cast_live_gate_flag_reaches_the_served_config(monkeypatch, flag, switching):
    import uvicorn
    from support.server import tiny_engine

    served = {}
    monkeypatch.setattr("sglang_cast.engine.build_engine", lambda engine_args: tiny_engine("vanilla"))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app))
    launch_server.main(["--speculative-algorithm", "NONE", "--cast-live-gate", flag])
    assert served["app"].state.server.config.live_gate.switching is switching


def test_cast_lookup_depth_replaces_the_profiles_choice_in_every_bucket(monkeypatch, tmp_path):
    """Without the flag each bucket keeps the profile's ``lookup_depth``; with it every
    bucket gets the flag's, as the other tree knobs (also on a hot reload: `ShapeOverride`)."""
    import uvicorn
    from support.autotune import profile
    from support.server import tiny_engine

    from sglang_cast.profile import save_profile

    tuned = profile()
    tuned = replace(tuned, settings=replace(tuned.settings, buckets=(
        replace(tuned.settings.buckets[0], lookup_depth=4), *tuned.settings.buckets[1:])))
    path = save_profile(tuned, tmp_path / "p.yaml")
    built = []
    monkeypatch.setattr("sglang_cast.engine.build_engine",
                        lambda engine_args: built.append(engine_args) or tiny_engine("vanilla"))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: None)
    served = ["--cast-profile", str(path), "--cast-calibrate", "off"]  # the planted profile's ISA may not be this CPU's
    launch_server.main([*served, "--cast-lookup-depth", "8"])
    launch_server.main([*served, "--cast-lookup-depth", "0"])
    launch_server.main(served)
    depths = [[b.lookup_depth for b in args.settings.buckets] for args in built]
    profiled = [b.lookup_depth for b in tuned.settings.buckets]
    assert profiled[0] == 4 and depths == [[8] * len(profiled), [0] * len(profiled), profiled]


def test_the_engine_is_built_and_timed_on_a_thread_that_has_ended_before_serving(monkeypatch):
    """Every torch op of the start-up (loading, the start-up calibration) runs on a
    passing thread, so the engine thread is the only one with an OpenMP pool
    (`server.build_thread`: with a second pool the server decoded at 53-65 % of the engine's speed)."""
    import threading

    import uvicorn
    from support.server import tiny_engine

    from sglang_cast.server import startup_calibration

    threads = {}
    real_calibrate = startup_calibration.calibrate_at_startup

    def build(engine_args):
        threads["build"] = threading.current_thread()
        return tiny_engine("vanilla")

    def calibrate(*args):
        threads["calibrate"] = threading.current_thread()
        return real_calibrate(*args)

    monkeypatch.setattr("sglang_cast.engine.build_engine", build)
    monkeypatch.setattr(startup_calibration, "calibrate_at_startup", calibrate)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: threads.update(serve=threading.current_thread()))
    launch_server.main(["--speculative-algorithm", "NONE"])
    assert threads["serve"] is threading.main_thread()
    assert threads["build"] is threads["calibrate"] and threads["build"] is not threading.main_thread()
    assert not threads["build"].is_alive()


def test_an_engine_that_cannot_be_built_is_a_one_line_error(monkeypatch, capsys):
    def refuse(engine_args):
        raise ValueError("draft_path: no such folder")

    monkeypatch.setattr("sglang_cast.engine.build_engine", refuse)
    with pytest.raises(SystemExit) as exit_info:
        launch_server.main(["--speculative-algorithm", "NONE"])
    assert exit_info.value.code == 2
    assert "draft_path: no such folder" in capsys.readouterr().err
