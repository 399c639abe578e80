"""``cast-autotune tune``: from the measured cost curves and the recorded traces to
the published profile YAML.

    the flags (autotune/parser.py, ``tune``)
    → `TuneOptions`, here: the device, the label checked against it, the weight
      formats (with ``--backend sglang`` the dense one, the runtime states' sizing
      and SGLang's engines for the live gate; with ``--calibrate-from`` another
      profile's tables fitted here)
    → `workflow.TuneConfig` (`common.tune_config`)
    → `workflow.tune_and_publish`: Optuna over trace replay per bucket and format,
      the fastest format, its live gate against plain decoding, and
      `publish.publish` writing profiles/<label>.yaml
    → `report.tuned`: what was tuned, gated and published.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sglang_cast.cast import PolicySettings
from sglang_cast.engine.format_choice import DENSE
from sglang_cast.engine.table_calibration import calibrate
from sglang_cast.profile import ProfileError, load_profile
from sglang_cast.sglang_plugin.memory_plan import GIB
from sglang_cast.sglang_plugin.state_cover import StateCap

# Module-qualified: tests stand in for the pipeline and for SGLang's model checks there.
from .. import report, sglang_backend, workflow
from ..costs import MeasuredCosts, calibrated_costs
from ..errors import USAGE, AutotuneError
from ..models import ModelPair
from ..options import (BackendOptions, DbOptions, LabelOptions, ModelOptions, RuntimeStateOptions, SpaceOptions,
                       WeightFormatOptions)
from ..prompts import PromptSet, load_prompts
from ..sglang_backend import PairIds, RuntimeStateSizing
from ..sglang_gate import SGLangGate
from .common import (checked_label, current_setup, dense_format_only, format_name, formats_for, load_pair, open_store,
                     require_one_device, resolve_device, tune_config)


@dataclass(frozen=True, kw_only=True)
class TuneOptions(LabelOptions, ModelOptions, WeightFormatOptions, SpaceOptions, DbOptions, BackendOptions,
                  RuntimeStateOptions):
    calibrate_from: Path | None  # another machine's profile, re-tuned for this one
    incumbent: Path | None  # the profile this tune would replace; its trees join the studies
    incumbent_margin: float  # how far above the incumbent's tree a pick must replay to replace it


def run(args: argparse.Namespace) -> int:
    options = TuneOptions.from_args(args)
    if options.calibrate_from is not None and options.backend != "native":
        raise AutotuneError("--calibrate-from: re-tunes for the native engine (the anchors time its forwards); "
                            "drop --backend sglang", USAGE)
    require_one_device(options)
    device = resolve_device(options)
    label = checked_label(options, device)
    sizing = state_sizing(options, device) if options.backend == "sglang" else None
    format_costs = None
    if options.calibrate_from is not None:
        format_costs = profile_fitted_here(options, device)
        formats = tuple(format_costs)
    elif options.backend == "sglang":
        dense_format_only(options)
        formats = (DENSE,)
    else:
        formats = formats_for(options, device)
    config = replace(tune_config(options, label, formats, sizing, options.backend),
                     incumbent=incumbent_settings(options.incumbent), incumbent_margin=options.incumbent_margin)
    prompts = load_prompts(options.dataset)
    store = open_store(options)
    pair = tuned_pair(options, device)
    gate = sglang_gate(options, config, prompts) if options.backend == "sglang" and config.confirm_prompts else None
    outcome = workflow.tune_and_publish(pair, store, current_setup(pair, device, options.backend, options.tp_size),
                                        config, prompts, load_format=lambda fmt: load_pair(options, device, fmt),
                                        progress=not options.quiet, format_costs=format_costs, sglang_gate=gate)
    states = None if sizing is None else sglang_backend.states_report(outcome.published.profile, sizing)
    print(report.tuned(outcome, lambda fmt: format_name(options, fmt), states))
    return 0


def incumbent_settings(path: Path | None) -> PolicySettings | None:
    """``--incumbent PROFILE``: the buckets of the profile this tune would replace."""
    if path is None:
        return None
    try:
        return load_profile(path).profile.settings
    except ProfileError as err:
        where = "" if str(path) in str(err) else f"{path}: "  # file errors name the file already
        raise AutotuneError(f"--incumbent: {where}{err}", USAGE) from None


def tuned_pair(options: TuneOptions, device: str) -> ModelPair | PairIds:
    """The pair ``tune`` keys traces and rows by: loaded in the native engine, or with
    ``--backend sglang`` its ids only (its live gate runs SGLang's engine)."""
    if options.backend == "sglang":
        models = sglang_backend.sglang_models(options.model_path, options.draft_path)
        return sglang_backend.pair_ids(models, options.dtype, device)
    return load_pair(options, device)


def sglang_gate(options: TuneOptions, config: workflow.TuneConfig, prompts: PromptSet) -> SGLangGate:
    """``--backend sglang``: the live gate's SGLang engines (its CPU engine without a
    GPU), refused in one line when SGLang's runtime does not import here."""
    models = sglang_backend.check_sglang_backend(options.model_path, options.draft_path, options.device,
                                                 torch.cuda.is_available(), options.tp_size, torch.cuda.device_count())
    on_cpu = sglang_backend.sglang_on_cpu(options.device, torch.cuda.is_available())
    if on_cpu:
        sglang_backend.enter_sglang_cpu_engine()
    return sglang_backend.sglang_live_gate(models, options.dtype, options.tp_size, on_cpu, prompts.texts,
                                           config.confirm_max_new_tokens, max(config.buckets), config.space)


def state_sizing(options: TuneOptions, device: str) -> RuntimeStateSizing:
    """``tune --backend sglang``: how the published profile's runtime states are sized
    (for SGLang's CPU engine when tune runs on the CPU without --gpu-memory-gb)."""
    models = sglang_backend.sglang_models(options.model_path, options.draft_path)
    cap = StateCap(options.max_states, options.max_state_memory, options.state_coverage)
    gpu_gib = options.gpu_memory_gb
    if gpu_gib is None:
        if device != "cuda":
            return sglang_backend.cpu_state_sizing(models, cap)
        gpu_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    return sglang_backend.runtime_state_sizing(models, gpu_gib, options.serve_context_length,
                                               options.max_running_requests, options.tp_size, cap)


def profile_fitted_here(options: TuneOptions, device: str) -> dict[str, MeasuredCosts]:
    """``tune --calibrate-from PROFILE``: the profile's tables fitted to forwards timed
    here in the profile's weight format, keyed by that format."""
    try:
        profile = load_profile(options.calibrate_from).profile
    except ProfileError as err:
        raise AutotuneError(f"--calibrate-from: {err}") from None
    weight_format = profile.weight_format or "fp32"
    if options.weight_formats not in ("auto", (weight_format,)):
        raise AutotuneError(f"--weight-format: --calibrate-from tunes the profile's own format ({weight_format}); "
                            "drop --weight-format or pass that one", USAGE)
    pair = load_pair(options, device, weight_format)
    costs = profile.settings.costs
    served = calibrate(pair.target, pair.draft, costs, max(options.buckets), pair.graph_backend)
    print(report.calibrated(options.calibrate_from, weight_format, served))
    return {weight_format: calibrated_costs(str(options.calibrate_from), costs, served.fit, served.report(costs))}
