"""``cast-autotune preflight`` and the memory arithmetic behind it.

The CLI tests run anywhere; the tests that compare the arithmetic with SGLang's
own sizing (its server-argument resolution, its model config, and the model's
reference parameter count) need ``.venv-sglang`` and are skipped elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_cast.cast import make_policy
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.memory_plan import (CUDA_CONTEXT, GIB, LaunchSettings, ModelShape,
                                                   decode_graph_batch_sizes, decode_graph_max_bs,
                                                   default_chunked_prefill,
                                                   default_mem_fraction_static, plan_memory, state_memory)
from sglang_cast.sglang_plugin.plugin_config import StaticShape
from support import ROOT
from support.plugin import require_sglang

LLAMA_8B = ROOT / "profiles/models/llama-3.1-8b/config.json"
H100 = ROOT / "profiles/h100.yaml"


def llama() -> ModelShape:
    return ModelShape.from_config(json.loads(LLAMA_8B.read_text()))


def h100_plan(states=None, **launch) -> tuple[StaticShape, object]:
    settings = load_profile(H100).profile.settings
    shape = StaticShape.covering(settings)
    if states is None:
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
    assert plan.target_weights + plan.draft_weights + plan.extra_states + plan.kv_pool + plan.slack == before_load
    assert plan.kv_tokens == plan.kv_pool // plan.kv_cell
    assert plan.extra_states == sum(s.kv_indices + s.custom_masks + s.graph_outputs for s in plan.states)
    shape = StaticShape.covering(load_profile(H100).profile.settings)
    startup = (shape.num_steps, shape.num_draft_tokens)
    assert len(plan.states) == len(CastDecider(make_policy("cast", load_profile(H100).profile.settings),
                                               shape).states) - 1  # the startup state is SGLang's
    assert startup not in {(s.depth, s.width) for s in plan.states}
    assert plan.slack_left == plan.slack - plan.sglang_reserve


def test_a_state_charges_flashinfers_kv_indices_and_masks_for_verify_and_draft_extend():
    """flashinfer_backend.py:1100-1138: T·context int32 indices and T·context uint8 mask per
    backend, T = graph max batch · width; two backends (verify, draft-extend); logits shared."""
    target = llama()
    state = state_memory(target, target.eagle_head(), 4, 16, 48, 131072)
    tokens = 48 * 16
    assert state.kv_indices == 2 * tokens * 131072 * 4
    assert state.custom_masks == 2 * tokens * 131072
    assert state.graph_outputs == tokens * 4 * target.hidden * 2  # 3 captured target states + the draft's
    assert state.total / GIB == pytest.approx(0.96, abs=0.005)
    windowed = ModelShape.from_config({**json.loads(LLAMA_8B.read_text()), "sliding_window": 4096})
    assert state_memory(windowed, target.eagle_head(), 4, 16, 48, 131072).kv_indices == 2 * state.kv_indices
    assert state_memory(target, target.eagle_head(), 4, 16, 0, 131072).total == 0  # no CUDA graphs, no graph state


def test_the_states_come_out_of_the_kv_pool_not_out_of_sglangs_slack():
    """The worker holds the states' bytes before SGLang sizes the pool (worker.StateMemoryHold)."""
    _, plan = h100_plan()
    _, without_states = h100_plan(states=[])
    assert plan.slack == without_states.slack
    assert without_states.kv_pool - plan.kv_pool == plan.extra_states > 0


def test_a_fraction_above_sglangs_default_is_refused_with_the_largest_that_leaves_its_reserve():
    _, plan = h100_plan()
    assert plan.mem_fraction_static == plan.default_fraction and plan.problems() == []
    fitting = plan.fitting_fraction()
    _, fits = h100_plan(mem_fraction_static=fitting)
    assert fits.problems() == []
    _, above = h100_plan(mem_fraction_static=fitting + 0.01)
    (problem,) = above.problems()
    assert f"pass {fitting:.3f} or less" in problem and "drop the flag" in problem


def test_a_context_longer_than_the_pool_is_refused_with_the_length_that_fits():
    _, plan = h100_plan(states=[], mem_fraction_static=0.316, context_length=131072)
    (problem,) = plan.problems()
    assert f"pass --context-length {plan.kv_tokens} or less" in problem and plan.kv_tokens < 131072


def test_tensor_parallel_ranks_hold_a_share_of_the_weights_and_kv_heads():
    _, one = h100_plan()
    _, four = h100_plan(tp_size=4)
    assert four.target_weights == one.target_weights // 4
    assert four.kv_cell == one.kv_cell // 4  # 8 KV heads: 2 per rank
    assert [s.total for s in four.states] == [s.total for s in one.states]  # indices count tokens, not heads
    assert four.sglang_reserve > one.sglang_reserve  # memory_hook.py:312: tp·pp/8 GiB more
    assert llama().kv_bytes_per_token(2, tp_size=16) == llama().kv_bytes_per_token(2, tp_size=8)  # one head each


# ------------------------------------------------------------------- CLI
def test_preflight_refuses_a_fraction_above_sglangs_default_and_names_the_fix(capsys):
    code, out, _ = preflight(capsys, "--context-length", "8192", "--mem-fraction-static", "0.9")
    assert code == 1 and out.splitlines()[-1].startswith("DOES NOT FIT")
    fraction = out.split("or pass ")[1].split()[0]
    code, out, _ = preflight(capsys, "--context-length", "8192", "--mem-fraction-static", fraction)
    assert code == 0 and out.splitlines()[-1] == "FITS"


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
MODEL_CONFIGS = "sglang.srt.arg_groups.pipeline"  # imports SGLang's model configs


def sglang_resolution(gpu_gib: float, max_running_requests: int, monkeypatch, tp_size: int = 1):
    """SGLang's resolved (mem_fraction_static, chunked_prefill_size, decode graph
    max batch) for a GPU of ``gpu_gib``, computed by SGLang on CPU as on CUDA
    (the prefill-graph default answers as it does on a GPU, breakable:
    cuda_graph_config.py:119-123)."""
    require_sglang(MODEL_CONFIGS)
    from sglang.srt.arg_groups import memory_hook
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.model_executor import cuda_graph_config
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setattr(cuda_graph_config, "default_prefill_backend", lambda: cuda_graph_config.Backend.BREAKABLE)
    monkeypatch.setattr(memory_hook, "get_device_memory_capacity", lambda device=None: gpu_gib * 1024)
    server_args = ServerArgs(model_path=str(LLAMA_8B.parent), device="cuda",
                             max_running_requests=max_running_requests, tp_size=tp_size)
    server_args.resolve_once()
    view = resolved_view(server_args)
    return view.mem_fraction_static, view.chunked_prefill_size, view.cuda_graph_config.decode.max_bs


@pytest.mark.parametrize("gpu_gib, running, tp_size", [(24, 48, 1), (24, 300, 4), (40, 48, 1), (48, 16, 1),
                                                       (80, 48, 1), (80, 300, 1), (80, 600, 4), (141, 48, 1),
                                                       (192, 48, 2)])
def test_default_fraction_matches_sglangs_own_resolution(gpu_gib, running, tp_size, monkeypatch):
    fraction, chunk, graph_bs = sglang_resolution(gpu_gib, running, monkeypatch, tp_size)
    gpu_mib = gpu_gib * 1024
    assert default_chunked_prefill(gpu_mib) == chunk
    assert decode_graph_max_bs(gpu_mib, running, tp_size) == graph_bs
    assert default_mem_fraction_static(gpu_mib, chunk, graph_bs, tp_size) == pytest.approx(fraction, abs=1e-9)


def test_each_state_captures_two_graphs_at_each_of_sglangs_23_speculative_batch_sizes_up_to_48():
    assert decode_graph_batch_sizes(48) == 23 and decode_graph_batch_sizes(8) == 8 and decode_graph_batch_sizes(9) == 9


def test_sglangs_default_fraction_on_an_80_gb_gpu_is_0_835_with_its_prefill_graphs():
    """The issue's reading: 0.835, not the 0.841 of a CPU resolution (no prefill graphs there)."""
    assert default_mem_fraction_static(80 * 1024, 8192, 48) == 0.835


def test_the_cited_sglang_lines_hold_what_the_memory_model_restates():
    require_sglang(MODEL_CONFIGS)
    import sglang

    root = Path(sglang.__file__).parent

    def line(path: str, number: int) -> str:
        return (root / path).read_text().splitlines()[number - 1]

    assert "(max_num_tokens * self.max_context_len,)" in line("srt/layers/attention/flashinfer_backend.py", 1108)
    assert "dtype=torch.int32" in line("srt/layers/attention/flashinfer_backend.py", 1109)
    assert "(max_num_tokens * self.max_context_len)" in line("srt/layers/attention/flashinfer_backend.py", 1135)
    assert "dtype=torch.uint8" in line("srt/layers/attention/flashinfer_backend.py", 1136)
    assert "self.num_wrappers = 2" in line("srt/layers/attention/flashinfer_backend.py", 412)
    assert "self.max_bs * self.captured_req_width" in line("srt/model_executor/runner/decode_cuda_graph_runner.py",
                                                           427)
    assert "self.max_num_token = self.max_bs * self.captured_req_width" in line(
        "srt/speculative/eagle_draft_extend_cuda_graph_runner.py", 155)
    assert "skip_prefill=False" in line("srt/speculative/draft_utils.py", 444)
    assert "graph_shared_output.get_logits_buffer" in line("srt/model_executor/runner/decode_cuda_graph_runner.py",
                                                           475)
    assert "reserved_mem += len(prefill_cuda_graph_config.bs) * 8" in line("srt/arg_groups/memory_hook.py", 386)
    assert "reserved_mem += cfg.tp_size * cfg.pp_size / 8 * 1024" in line("srt/arg_groups/memory_hook.py", 312)
    assert "return Backend.BREAKABLE if is_cuda() else Backend.DISABLED" in line(
        "srt/model_executor/cuda_graph_config.py", 123)
    assert "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING = EnvBool(False)" in line("srt/environ.py", 640)
    assert "slack_gb = pre_model_load_memory * (1 - get_schedule().mem_fraction_static)" in line(
        "srt/mem_cache/kv_cache_configurator.py", 3007)
    assert "self.init_memory_pools()" in line("srt/managers/scheduler.py", 1137)
    assert "self.maybe_init_draft_worker()" in line("srt/managers/scheduler.py", 1133)
    assert "list(range(1, 9, 1))" in line("srt/arg_groups/cuda_graph_hook.py", 520)
    assert "list(range(272, max_bs + 1, 16))" in line("srt/arg_groups/cuda_graph_hook.py", 524)


def test_kv_cell_matches_sglangs_model_config():
    require_sglang(MODEL_CONFIGS)
    from sglang.srt.configs.model_config import ModelConfig

    config = ModelConfig(str(LLAMA_8B.parent))
    # pool_configurator._compute_cell_size (MHA): kv_heads · (head_dim + v_head_dim) · layers · dtype bytes
    for tp_size in (1, 2, 4, 8, 16):
        sglang_cell = (config.get_num_kv_heads(tp_size) * (config.head_dim + config.v_head_dim)
                       * config.num_hidden_layers * 2)
        assert llama().kv_bytes_per_token(2, tp_size) == sglang_cell


def test_weights_match_the_reference_model_built_on_the_meta_device():
    import torch
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.from_pretrained(str(LLAMA_8B.parent))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert llama().params() == sum(p.numel() for p in model.parameters())
    assert llama().params() * 2 / GIB == pytest.approx(14.96, abs=0.01)


# ------------------------------------------------- the shipped GPU profiles
@pytest.mark.parametrize("name, model, gpu_gib, tp_size", [
    ("h100.yaml", "llama-3.1-8b", 79.6, 1),  # an 80 GB GPU reports a little less than 80 GiB
    ("h200.yaml", "llama-3.1-8b", 140.0, 1),
    ("h100-tp4.yaml", "llama-3.1-70b", 79.6, 4),
])
def test_shipped_gpu_profiles_fit_llama_at_sglangs_defaults_with_at_most_8_states(name, model, gpu_gib, tp_size):
    """SGLang's default fraction and the model's own 128k context, per GPU."""
    from sglang_cast.sglang_plugin.plugin_config import SGLangSection

    profile = load_profile(ROOT / "profiles" / name).profile
    section = SGLangSection.of(profile)
    assert section.parallel.tp_size == tp_size and section.runtime_states is not None
    shape = StaticShape.covering(profile.settings)
    states = CastDecider(make_policy("cast", profile.settings), shape, section.runtime_states).states
    assert len(states) <= section.cap.max_states == 8
    config = json.loads((ROOT / "profiles/models" / model / "config.json").read_text())
    target = ModelShape.from_config(config)
    plan = plan_memory(target, target.eagle_head(), states, (shape.num_steps, shape.num_draft_tokens),
                       LaunchSettings(gpu_memory_gib=gpu_gib, context_length=config["max_position_embeddings"],
                                      tp_size=tp_size))
    assert plan.mem_fraction_static == plan.default_fraction and plan.problems() == []
    assert plan.extra_states <= section.cap.max_memory_share * plan.gpu_bytes


def test_llama_70b_is_sized_from_its_config():
    config = json.loads((ROOT / "profiles/models/llama-3.1-70b/config.json").read_text())
    assert ModelShape.from_config(config).params() == 70_553_706_496  # Meta's published 70.6B parameters
