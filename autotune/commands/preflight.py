"""``cast-autotune preflight``: will this profile's SGLang launch fit on that GPU?

The runtime states the CAST worker would build for the profile, the memory each
needs on one GPU and the totals, with the arithmetic of
``sglang_cast.sglang_plugin.memory_plan`` (SGLang 0.5.23's own sizing rules);
exit 0 when it fits, 1 when it does not.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sglang_cast.cast import PolicySettings, make_policy
from sglang_cast.profile import ProfileError, load_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.memory_plan import LaunchSettings, MemoryPlan, plan_memory
from sglang_cast.sglang_plugin.plugin_config import ParallelLayout, SGLangSection, StaticShape, require_layout

from .. import report
from ..errors import AutotuneError
from ..model_configs import read_config_json, read_model_config
from ..options import Options

DOES_NOT_FIT = 1


@dataclass(frozen=True, kw_only=True)
class PreflightOptions(Options):
    profile: Path
    model_config: Path
    draft_config: Path | None  # None: an EAGLE-3 head of the target's layer shape
    gpu_memory_gb: float
    tp_size: int | None  # None: the layout the profile was made for
    context_length: int | None  # None: the model's max_position_embeddings
    max_running_requests: int
    mem_fraction_static: float | None
    chunked_prefill_size: int | None
    speculative_num_steps: int | None  # None: the profile's covering shape
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None


def run(args: argparse.Namespace) -> int:
    options = PreflightOptions.from_args(args)
    shape, plan = preflight(options)
    print(report.preflight(options.profile, shape, options.draft_config, plan))
    return DOES_NOT_FIT if plan.problems() else 0


def preflight(options: PreflightOptions) -> tuple[StaticShape, MemoryPlan]:
    try:
        profile = load_profile(options.profile).profile
        section = SGLangSection.of(profile)
    except ProfileError as err:
        raise AutotuneError(f"--profile: {err}") from None
    tp_size = options.tp_size or section.parallel.tp_size
    try:
        require_layout(profile, ParallelLayout(tp_size, section.parallel.pp_size), options.profile)
    except ProfileError as err:
        raise AutotuneError(f"--tp-size {tp_size}: {err}") from None
    settings = profile.settings
    shape = static_shape(options, settings)
    target = read_model_config(options.model_config, "--model-config")
    draft = (read_model_config(options.draft_config, "--draft-config") if options.draft_config
             else target.eagle_head())
    try:
        states = CastDecider(make_policy("cast", settings), shape, section.runtime_states).states
    except ValueError as err:
        raise AutotuneError(f"--profile: {err}") from None
    launch = LaunchSettings(gpu_memory_gib=options.gpu_memory_gb, context_length=context_length(options),
                            max_running_requests=options.max_running_requests,
                            mem_fraction_static=options.mem_fraction_static,
                            chunked_prefill_size=options.chunked_prefill_size, tp_size=tp_size)
    return shape, plan_memory(target, draft, states, shape.startup_state, launch)


def context_length(options: PreflightOptions) -> int:
    """``--context-length``, else the model's ``max_position_embeddings`` (SGLang's default)."""
    if options.context_length is not None:
        return options.context_length
    context = read_config_json(options.model_config, "--model-config").get("max_position_embeddings")
    if not isinstance(context, int) or context < 1:
        raise AutotuneError("--context-length: not given and the model config has no max_position_embeddings")
    return context


def static_shape(options: PreflightOptions, settings: PolicySettings) -> StaticShape:
    """The launch's tree shape: the flags where given, else the profile's covering shape."""
    try:
        return StaticShape.from_flags(settings, options.profile, num_steps=options.speculative_num_steps,
                                      topk=options.speculative_eagle_topk,
                                      num_draft_tokens=options.speculative_num_draft_tokens)
    except ValueError as err:
        raise AutotuneError(str(err)) from None
