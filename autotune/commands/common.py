"""What several commands do alike: pick the device, check the label against it, list
the weight formats, load the model pair, key its measurements, open the database,
and turn the tuning flags into `workflow.TuneConfig`.

Each helper takes the option group it reads (`autotune.options`), so a command
passes its own options dataclass.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch

from sglang_cast import hardware
from sglang_cast.engine.build import DTYPES
from sglang_cast.engine.format_choice import DENSE, candidates, running_format
from sglang_cast.profile import PROFILE_DIR

from ..errors import USAGE, AutotuneError
from ..labels import check_label
from ..models import ModelPair, load_model_pair
from ..options import BackendOptions, DbOptions, LabelOptions, ModelOptions, SpaceOptions, WeightFormatOptions
from ..parser import PROG
from ..sglang_backend import RuntimeStateSizing
from ..store import Setup, Store
from ..workflow import TuneConfig


def open_store(options: DbOptions) -> Store:
    return Store(options.db, options.db_timeout)


def resolve_device(options: ModelOptions) -> str:
    if options.device == "cuda" and not torch.cuda.is_available():
        raise AutotuneError("--device: cuda requested but no CUDA device is available (accepted here: cpu)")
    return options.device or ("cuda" if torch.cuda.is_available() else "cpu")


def checked_label(options: LabelOptions, device: str) -> str:
    check_label(options.label, device, hardware.device_name(device), options.force_label)
    return options.label


def formats_for(options: WeightFormatOptions, device: str) -> tuple[str, ...]:
    """``--weight-format`` as a list: ``auto`` is every CPU candidate, or dense on CUDA."""
    if options.weight_formats != "auto":
        if device != "cpu" and options.weight_formats != (DENSE,):
            raise AutotuneError(f"--weight-format: packed formats run on the CPU only; use auto or {DENSE} on {device}")
        return options.weight_formats
    return candidates() if device == "cpu" else (DENSE,)


def format_name(options: ModelOptions, weight_format: str) -> str:
    """A format spec named for what runs (``fp32`` of a bfloat16 model is ``bf16``)."""
    return running_format(weight_format, DTYPES[options.dtype])


def dense_format_only(options: WeightFormatOptions) -> None:
    """SGLang loads the checkpoint's dense weights: no packed format to profile."""
    if options.weight_formats not in ("auto", (DENSE,)):
        raise AutotuneError(f"--weight-format: SGLang loads the checkpoint's dense weights (accepted with --backend "
                            f"sglang: auto or {DENSE}, got {','.join(options.weight_formats)})", USAGE)


def require_one_device(options: BackendOptions) -> None:
    """``--tp-size`` above 1 is SGLang's layout; the native engine runs on one device."""
    if options.backend != "sglang" and options.tp_size > 1:
        raise AutotuneError(f"--tp-size: the native engine runs on one device (accepted with --backend native: 1, "
                            f"got {options.tp_size}); tensor parallelism is SGLang's: pass --backend sglang", USAGE)


def load_pair(options: ModelOptions, device: str, weight_format: str = "fp32") -> ModelPair:
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    pair = load_model_pair(options.model_path, options.draft_path, device, options.dtype, options.random_draft_seed,
                           weight_format)
    if pair.random_draft and weight_format == "fp32":
        print(f"{PROG}: note: no trained draft head for this model; using a random-weight EAGLE head "
              f"({pair.draft_id}): its forward costs are those of an EAGLE-1/2 head of this shape, its acceptance "
              "is near zero", file=sys.stderr)
    return pair


def current_setup(pair, device: str, backend: str = "native", tp_size: int = 1) -> Setup:
    """What the pair's measurements and traces are keyed by on this machine."""
    return Setup.current(hardware.device_name(device), pair.target_id, pair.draft_id, pair.dtype, backend, tp_size)


def tune_config(options: SpaceOptions, label: str, formats: tuple[str, ...] = ("fp32",),
                runtime_states: RuntimeStateSizing | None = None, backend: str = "native") -> TuneConfig:
    # A profile tuned on SGLang's cost curve is what `launch_server --backend sglang` looks for first.
    folder = PROFILE_DIR / "sglang" if backend == "sglang" else PROFILE_DIR
    space = options.search_space()
    if runtime_states is not None and not runtime_states.branch_runs:
        space = replace(space, lookup_depth=0)
    return TuneConfig(label=label, output=options.output or folder / f"{label}.yaml", buckets=options.buckets,
                      trials=options.trials, space=space, study_prefix=options.study,
                      seed=options.seed, max_traces=options.max_traces, dataset=options.trace_dataset,
                      confirm_prompts=options.confirm_prompts,
                      confirm_max_new_tokens=options.confirm_max_new_tokens, context_length=options.context_length,
                      weight_formats=formats, live_rounds=options.live_rounds, live_margin=options.live_margin,
                      live_min_speedup=options.live_min_speedup, confirm_sets=options.confirm_sets,
                      runtime_states=runtime_states)
