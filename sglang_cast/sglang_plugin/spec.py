"""How SGLang sees CAST and GOODPUT: an EAGLE-family algorithm with its own worker.

SGLang's scheduler, model runner and KV sizing branch on ``is_eagle()`` /
``is_eagle3()`` (capture of the target's hidden states, draft KV sizing, the
overlap relay of ``topk`` tensors, CUDA-graph dummies).  CAST runs EAGLE's
pipeline with other decisions, so every such question is answered as the
built-in EAGLE (or EAGLE3, for an EAGLE-3 head) would answer it; only the worker
class and the server-args checks are ours.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING

from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from ..cast import PolicySettings, make_policy
from .cpu_runtime import CPU_ATTENTION_BACKEND
from .decider import CastDecider
from .memory_plan import LaunchSettings, ModelShape, plan_memory
from .plugin_config import (DEFAULT_MAX_RUNNING_REQUESTS, POLICY_OF_ALGORITHM, PP_REFUSAL, PROFILE_ENV,
                            ParallelLayout, SGLangSection, StaticShape, cached_config, draft_is_eagle3,
                            load_fitting_profile)

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

log = logging.getLogger(__name__)


class CastSpecAlgo(CustomSpecAlgo):
    """Answers SGLang's capability questions like its built-in EAGLE member.

    ``is_eagle3`` depends on the draft checkpoint, which SGLang only knows per
    process (from the runtime context), so it is looked up on first use.
    """

    @property
    def policy_name(self) -> str:
        return POLICY_OF_ALGORITHM[self.name]

    @functools.cached_property
    def builtin(self) -> SpeculativeAlgorithm:
        from sglang.srt.runtime_context import get_spec

        eagle3 = draft_is_eagle3(get_spec().speculative_draft_model_path)
        return SpeculativeAlgorithm.EAGLE3 if eagle3 else SpeculativeAlgorithm.EAGLE

    # Questions whose answer is the same for EAGLE and EAGLE3 need no lookup.
    def is_eagle(self) -> bool:
        return True

    def is_eagle3(self) -> bool:
        return self.builtin.is_eagle3()

    def supports_mixed_chunk(self) -> bool:
        return SpeculativeAlgorithm.EAGLE.supports_mixed_chunk()

    def supports_grammar_overlap(self) -> bool:
        return SpeculativeAlgorithm.EAGLE.supports_grammar_overlap()

    def has_draft_kv(self) -> bool:
        return SpeculativeAlgorithm.EAGLE.has_draft_kv()

    def need_topk(self) -> bool:
        return SpeculativeAlgorithm.EAGLE.need_topk()

    def carries_draft_hidden_states(self) -> bool:
        return SpeculativeAlgorithm.EAGLE.carries_draft_hidden_states()

    def get_platform_worker_cls(self) -> None:
        """CUDA runs the plugin's own worker; no out-of-tree platform replaces it."""
        return None

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True,
                          needs_confidence_relay: bool = False):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

    def build_disagg_draft_input(self, batch, last_tokens_tensor, future_map):
        return self.builtin.build_disagg_draft_input(batch, last_tokens_tensor, future_map)

    def handle_server_args(self, server_args: ServerArgs) -> None:
        """EAGLE's defaults: its batch limit when none was given, and on the CPU no
        overlap schedule (SGLang's overlap loop runs Triton kernels that have no CPU
        driver; its own EAGLE turns overlap off there, ``speculative_hook.py``,
        ``_disable_overlap_schedule_for_cpu``).  The rest is checked in
        :func:`validate_server_args`."""
        if server_args.max_running_requests is None:
            server_args.max_running_requests = DEFAULT_MAX_RUNNING_REQUESTS
        if server_args.device == "cpu" and not server_args.disable_overlap_schedule:
            server_args.disable_overlap_schedule = True
            log.warning("%s on the CPU: overlap schedule off, as for SGLang's EAGLE there", self.name)


def validate_server_args(server_args: ServerArgs) -> None:
    """Refuse what the plugin does not run, before any model is loaded.  Runs in
    SGLang's argument resolution, so it also guards a plain ``sglang serve
    --speculative-algorithm CAST``."""
    algorithm = str(server_args.speculative_algorithm).upper()
    problems = []
    if not server_args.speculative_draft_model_path:
        problems.append("--speculative-draft-model-path (an EAGLE or EAGLE-3 head) is required")
    shape_flags = (server_args.speculative_num_steps, server_args.speculative_eagle_topk,
                   server_args.speculative_num_draft_tokens)
    if any(value is None for value in shape_flags):
        problems.append("--speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens "
                        "are required (the largest tree any profile bucket may use)")
    problems += device_problems(server_args.device, server_args.attention_backend)
    if server_args.pp_size not in (None, 1):
        problems.append(f"--pp-size must be 1 (got {server_args.pp_size}): {PP_REFUSAL}")
    if (server_args.attn_dp_size or 1) > 1:
        problems.append(f"DP attention (--attn-dp-size {server_args.attn_dp_size}) is not supported: SGLang pads "
                        "the DP ranks' forwards to one shape per iteration, which CAST's per-replica state switch "
                        "does not follow; plain --dp-size replicas are")
    for flag, value in (("--speculative-use-rejection-sampling", server_args.speculative_use_rejection_sampling),
                        ("--speculative-adaptive", server_args.speculative_adaptive),
                        ("--enable-multi-layer-eagle", server_args.enable_multi_layer_eagle)):
        if value:
            problems.append(f"{flag} is not supported with {algorithm} (CAST chooses the tree itself)")
    if problems:
        raise ValueError(f"--speculative-algorithm {algorithm}: " + "; ".join(problems))
    shape = StaticShape(*shape_flags)
    profile = os.environ.get(PROFILE_ENV)
    if not profile:
        raise ValueError(f"--speculative-algorithm {algorithm} needs a CAST profile: set {PROFILE_ENV} to its YAML "
                         "path (python -m sglang_cast.launch_server --backend sglang --cast-profile PATH does)")
    loaded = load_fitting_profile(profile, shape, ParallelLayout(server_args.tp_size or 1, server_args.pp_size or 1))
    shape.check()
    check_memory(server_args, loaded.profile.settings, shape, SGLangSection.of(loaded.profile).runtime_states)


def device_problems(device: str | None, attention_backend: str | None) -> list[str]:
    """Where the plugin runs: on a CUDA GPU with FlashInfer's custom-mask attention,
    or on SGLang's CPU engine with the ``intel_amx`` backend (its only backend that
    runs EAGLE's tree attention on a CPU; `cpu_runtime`)."""
    if device == "cpu":
        if attention_backend not in (None, CPU_ATTENTION_BACKEND):
            return [f"--attention-backend must be {CPU_ATTENTION_BACKEND} on --device cpu (got {attention_backend!r}; "
                    "SGLang rewrites intel_amx to torch_native on a CPU without AMX, which its EAGLE refuses: "
                    "launch with python -m sglang_cast.launch_server --backend sglang --device cpu, which keeps it)"]
        return []
    problems = []
    for flag, value, wanted in (("--attention-backend", attention_backend, "flashinfer"), ("--device", device, "cuda")):
        if value not in (None, wanted):
            problems.append(f"{flag} must be {wanted} (got {value!r})")
    return problems


def check_memory(server_args: ServerArgs, settings: PolicySettings, shape: StaticShape,
                 runtime_states: tuple[tuple[int, int], ...] | None) -> None:
    """``cast-autotune preflight``'s check, at startup: refuse, before any weights
    load, a launch whose runtime states would not fit in GPU memory.  Skipped (with
    a warning) when the GPU's size or a model's config.json is not known yet.
    Per GPU: with ``--tp-size N`` each rank holds 1/N of the weights and KV heads.
    On the CPU there is nothing to add to SGLang's own sizing: a runtime state holds
    no CUDA graphs or FlashInfer wrappers there (the ``intel_amx`` backend keeps no
    per-state buffers), so SGLang's KV pool is all the states share."""
    if server_args.device == "cpu":
        log.info("CAST memory check on the CPU: runtime states add no graph or attention-wrapper memory there; "
                 "SGLang sizes the KV pool from RAM as for plain decoding")
        return
    from sglang.srt.utils.common import get_device_memory_capacity

    gpu_mib = get_device_memory_capacity(server_args.device or "cuda")
    target = cached_config(server_args.model_path)
    draft = cached_config(server_args.speculative_draft_model_path)
    if not gpu_mib or target is None or draft is None:
        log.warning("CAST memory check skipped (GPU memory or a config.json not known before loading); run "
                    "`cast-autotune preflight` for this launch")
        return
    launch = LaunchSettings(
        gpu_memory_gib=gpu_mib / 1024,
        context_length=server_args.context_length or int(target.get("max_position_embeddings") or 0),
        max_running_requests=server_args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS,
        mem_fraction_static=server_args.mem_fraction_static, chunked_prefill_size=server_args.chunked_prefill_size,
        tp_size=server_args.tp_size or 1)
    states = CastDecider(make_policy("cast", settings), shape, runtime_states).states
    plan = plan_memory(ModelShape.from_config(target, server_args.model_path),
                       ModelShape.from_config(draft, server_args.speculative_draft_model_path), states,
                       shape.startup_state, launch,
                       eagle3=draft_is_eagle3(server_args.speculative_draft_model_path))
    problems = plan.problems()
    if problems:
        algorithm = str(server_args.speculative_algorithm).upper()
        raise ValueError(f"--speculative-algorithm {algorithm} would not fit in {gpu_mib / 1024:.0f} GiB of GPU "
                         f"memory: {'; '.join(problems)}")
