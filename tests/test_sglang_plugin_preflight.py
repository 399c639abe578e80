"""``cast-autotune preflight`` and the memory arithmetic behind it.

The CLI tests run anywhere; the tests that compare the arithmetic with SGLang's
own sizing (its server-argument resolution, its model config, and the model's
reference parameter count) need ``.venv-sglang`` and are skipped elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sglang_cast.cast import make_policy
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.memory_plan import (CUDA_CONTEXT, GIB, LaunchSettings,
                                                   ModelShape, decode_graph_max_bs, default_chunked_prefill,
                                                   default_mem_fraction_static, plan_memory)
from sglang_cast.sglang_plugin.plugin_config import StaticShape

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8B = ROOT / "profiles/models/llama-3.1-8b/config.json"
H100 = ROOT / "profiles/h100.yaml"


def llama() -> ModelShape:
    return ModelShape.from_config(json.loads(LLAMA_8B.read_text()))


def h100_plan(**launch) -> tuple[StaticShape, object]:
    settings = load_profile(H100).profile.settings
    shape = StaticShape.covering(settings)
    states = CastDecider(make_policy("cast", settings), shape).states
    values = dict(gpu_memory_gib=80, context_length=8192)
    values.update(launch)
    plan = plan_memory(llama(), llama().eagle_head(), states, (shape.num_steps, shape.num_draft_tokens),
                       LaunchSettings(**values))
    return shape, plan


def cli_main():
    """``cast-autotune``'s entry point (its other commands need optuna, absent from .venv-sglang)."""
    try:
        from autotune.cli import main
    except ImportError as err:
        pytest.skip(f"cast-autotune does not import here ({err}); run with the project's .venv")
    return main


def preflight(capsys, *extra: str) -> tuple[int, str, str]:
    code = cli_main()(["preflight", "--profile", str(H100), "--model-config", str(LLAMA_8B), "--gpu-memory-gb", "80",
                 *extra])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------- arithmetic
def test_llama_8b_is_sized_from_its_config():
    model = llama()
    assert model.params() == 8_030_261_248  # Meta's published 8.03B parameters
    assert model.kv_bytes_per_token(2) == 8 * 2 * 128 * 32 * 2  # 128 KiB per token in bf16


def test_the_plan_adds_up():
    _, plan = h100_plan()
    before_load = plan.gpu_bytes - CUDA_CONTEXT
    assert plan.target_weights + plan.draft_weights + plan.kv_pool + plan.slack == before_load
    assert plan.kv_tokens == plan.kv_pool // plan.kv_cell
    assert plan.extra_states == sum(s.graph_buffers for s in plan.states)  # no workspace of their own
    assert len(plan.states) == len(CastDecider(make_policy("cast", load_profile(H100).profile.settings),
                                               StaticShape(13, 12, 72)).states) - 1  # the startup state is SGLang's
    assert plan.slack_left == plan.slack - plan.sglang_reserve - plan.extra_states


def test_sglangs_default_fraction_leaves_no_room_for_extra_states_and_the_fix_is_exact():
    _, plan = h100_plan()
    assert plan.mem_fraction_static == plan.default_fraction and plan.problems()
    fitting = plan.fitting_fraction()
    assert f"pass --mem-fraction-static {fitting:.3f}" in plan.problems()[0]
    _, fits = h100_plan(mem_fraction_static=fitting)
    assert fits.problems() == [] and fits.slack_left >= 0
    _, above = h100_plan(mem_fraction_static=fitting + 0.002)
    assert above.slack_left < 0 and above.problems()


def test_a_context_longer_than_the_pool_is_refused_with_the_length_that_fits():
    _, plan = h100_plan(mem_fraction_static=0.316, context_length=131072)
    (problem,) = plan.problems()
    assert f"pass --context-length {plan.kv_tokens} or less" in problem and plan.kv_tokens < 131072


# ------------------------------------------------------------------- CLI
def test_preflight_passes_h100_yaml_for_llama_8b_on_80_gb_with_the_fraction_it_names(capsys):
    code, out, _ = preflight(capsys, "--context-length", "8192")
    assert code == 1 and out.splitlines()[-1].startswith("DOES NOT FIT")
    fraction = out.split("pass --mem-fraction-static ")[1].split()[0]
    code, out, _ = preflight(capsys, "--context-length", "8192", "--mem-fraction-static", fraction)
    assert code == 0 and out.splitlines()[-1] == "FITS"
    assert "--speculative-num-steps 13 --speculative-eagle-topk 12 --speculative-num-draft-tokens 72" in out
    assert " 13 x 64 " in out and " 13 x 72 " not in out  # the startup state is SGLang's own


@pytest.mark.parametrize("extra, message", [
    (("--gpu-memory-gb", "0"), "--gpu-memory-gb: expected"),
    (("--mem-fraction-static", "1.5"), "--mem-fraction-static: expected"),
    (("--speculative-num-steps", "4"), "max_depth=13 but SGLang runs with --speculative-num-steps 4"),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, extra, message):
    try:
        code, _, err = preflight(capsys, *extra)
    except SystemExit as exit_:  # argparse's own refusal
        code, err = exit_.code, capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_missing_model_config_is_named(capsys, tmp_path):
    code = cli_main()(["preflight", "--profile", str(H100), "--model-config", str(tmp_path / "none.json"),
                 "--gpu-memory-gb", "80"])
    err = capsys.readouterr().err
    assert code == 2 and "--model-config: cannot read a JSON model config" in err


# ----------------------------------------------- against SGLang's own code
def require_sglang() -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import sglang.srt.arg_groups.pipeline  # noqa: F401  (imports SGLang's model configs)
    except Exception as err:  # ImportError, or torchvision's RuntimeError on a CPU-only torch
        pytest.skip(f"SGLang 0.5.23 does not import here ({type(err).__name__}); run with .venv-sglang/bin/python")


def sglang_resolution(gpu_gib: float, max_running_requests: int, monkeypatch):
    """SGLang's resolved (mem_fraction_static, chunked_prefill_size, decode graph
    max batch) for a GPU of ``gpu_gib``, computed by SGLang on CPU."""
    require_sglang()
    from sglang.srt.arg_groups import memory_hook
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setattr(memory_hook, "get_device_memory_capacity", lambda device=None: gpu_gib * 1024)
    server_args = ServerArgs(model_path=str(LLAMA_8B.parent), device="cuda",
                             max_running_requests=max_running_requests)
    server_args.resolve_once()
    view = resolved_view(server_args)
    return view.mem_fraction_static, view.chunked_prefill_size, view.cuda_graph_config.decode.max_bs


@pytest.mark.parametrize("gpu_gib, running", [(24, 48), (40, 48), (48, 16), (80, 48), (80, 300), (141, 48)])
def test_default_fraction_matches_sglangs_own_resolution(gpu_gib, running, monkeypatch):
    fraction, chunk, graph_bs = sglang_resolution(gpu_gib, running, monkeypatch)
    gpu_mib = gpu_gib * 1024
    assert default_chunked_prefill(gpu_mib) == chunk
    assert decode_graph_max_bs(gpu_mib, running) == graph_bs
    assert default_mem_fraction_static(gpu_mib, chunk, graph_bs) == pytest.approx(fraction, abs=1e-9)


def test_kv_cell_matches_sglangs_model_config():
    require_sglang()
    from sglang.srt.configs.model_config import ModelConfig

    config = ModelConfig(str(LLAMA_8B.parent))
    # pool_configurator._compute_cell_size (MHA): kv_heads · (head_dim + v_head_dim) · layers · dtype bytes
    sglang_cell = config.get_num_kv_heads(1) * (config.head_dim + config.v_head_dim) * config.num_hidden_layers * 2
    assert llama().kv_bytes_per_token(2) == sglang_cell


def test_weights_match_the_reference_model_built_on_the_meta_device():
    import torch
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.from_pretrained(str(LLAMA_8B.parent))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert llama().params() == sum(p.numel() for p in model.parameters())
    assert llama().params() * 2 / GIB == pytest.approx(14.96, abs=0.01)
