"""``cast-autotune profile``: time the target's and the draft's forwards over a grid
(the native engine, one weight format after another, or SGLang's own forwards),
then whole engine steps for the host-overhead table.  Every point is committed at
once, and a rerun measures only what is missing."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sglang_cast import hardware
from sglang_cast.models.weights import DraftFormat, WeightFormat
from sglang_cast.sglang_plugin.profile_forwards import RankLost

# Module-qualified: a test stands in for SGLang's entry points there.
from .. import report, sglang_backend
from ..costs import measured_costs
from ..errors import RUNTIME, AutotuneError
from ..grid import ROLES, ProfileGrid
from ..options import (BackendOptions, DbOptions, GridOptions, LabelOptions, ModelOptions, OverheadOptions,
                       WeightFormatOptions)
from ..overhead import NativeStepTimer, StepDesign, StepTimer, design_new_tokens, run_step_profile
from ..models import ModelPair
from ..profiler import GridJob, ProfileReport, TimerFactory, native_timers, profile_grid, profile_grids
from ..prompts import load_prompts
from ..sglang_backend import SGLangModels
from ..store import Setup, Store
from .common import (checked_label, current_setup, dense_format_only, format_name, formats_for, load_pair, open_store,
                     require_one_device, resolve_device)


@dataclass(frozen=True, kw_only=True)
class ProfileOptions(LabelOptions, ModelOptions, WeightFormatOptions, GridOptions, OverheadOptions, DbOptions,
                     BackendOptions):
    dataset: Path | None  # prompts the host-overhead steps decode (None: autotune/prompts.txt)


def run(args: argparse.Namespace) -> int:
    options = ProfileOptions.from_args(args)
    require_one_device(options)
    if options.backend == "sglang":
        profile_sglang(options)
        return 0
    device = resolve_device(options)
    checked_label(options, device)
    formats = formats_for(options, device)
    store = open_store(options)
    runs = format_runs(options, device, formats)
    grid = options.profile_grid()
    profile_forwards(options, store, runs, grid)
    for each in runs:
        if options.overhead_steps:
            measure_overhead(options, store, each.setup, grid, step_design(options, grid),
                             NativeStepTimer(each.pair, measured_costs(store, each.setup, overhead=False).costs))
        else:
            print(report.OVERHEAD_SKIPPED)
    if len(formats) > 1:
        print(report.profiled_formats(formats))
    return 0


@dataclass(frozen=True)
class FormatRun:
    """One weight format of a ``profile`` run: its loaded pair and setup, and per role
    the run's format that times the role's rows (its index in the run; itself, or the
    first format with the same target part or draft head format, whose rows it copies:
    a target forward reads none of the draft's weights, nor a draft forward the
    target's, and timing the same forward twice only measures the machine's drift)."""

    index: int
    name: str  # as the output names it (`format_name`)
    pair: ModelPair
    setup: Setup
    timed_by: dict[str, int]

    @property
    def own_roles(self) -> tuple[str, ...]:
        """The roles whose rows this format times itself."""
        return tuple(role for role in ROLES if self.timed_by[role] == self.index)


def role_part(weight_format: str, role: str) -> WeightFormat | DraftFormat:
    """What a role's forward runs of ``weight_format``: the draft head format, or the rest."""
    parsed = WeightFormat.parse(weight_format)
    return parsed.draft if role == "draft" else replace(parsed, draft=DraftFormat())


def format_runs(options: ProfileOptions, device: str, formats: tuple[str, ...]) -> list[FormatRun]:
    """Every format's pair loaded (their rows are timed together) and who times what."""
    runs: list[FormatRun] = []
    for index, fmt in enumerate(formats):
        pair = load_pair(options, device, fmt)
        timed_by = {role: next(i for i, other in enumerate(formats) if role_part(other, role) == role_part(fmt, role))
                    for role in ROLES}
        runs.append(FormatRun(index, format_name(options, fmt), pair, current_setup(pair, device), timed_by))
    return runs


def profile_forwards(options: ProfileOptions, store: Store, runs: list[FormatRun], grid: ProfileGrid) -> None:
    """Time every format's own rows together (``profiler.profile_grids``: the formats
    alternate inside each row, so drift cannot rank them), give each format the rows
    it shares, then print each one's cost curves."""
    results = profile_grids([GridJob(native_timers(each.pair), each.setup, each.own_roles) for each in runs], store,
                            grid, max_age=options.profile_max_age, progress=not options.quiet)
    for each, result in zip(runs, results):
        for role, source in each.timed_by.items():
            if source != each.index:
                copied = store.copy_measurements(runs[source].setup, each.setup, role)
                print(report.rows_shared(role, runs[source].name, copied))
        print_profiled(options, store, each.setup, grid, f"weight format {each.name}", result)


def profile_sglang(options: ProfileOptions) -> None:
    """Measure (or resume) SGLang's own forwards, then its whole iterations for the
    host-overhead table (dense ``--dtype``), on a CUDA GPU or, without one, on
    SGLang's CPU engine; what cannot run is refused before anything loads."""
    models = sglang_backend.check_sglang_backend(options.model_path, options.draft_path, options.device,
                                                 torch.cuda.is_available(), options.tp_size, torch.cuda.device_count())
    on_cpu = sglang_backend.sglang_on_cpu(options.device, torch.cuda.is_available())
    device = "cpu" if on_cpu else "cuda"
    checked_label(options, device)
    dense_format_only(options)
    if on_cpu:
        sglang_backend.enter_sglang_cpu_engine()
    store = open_store(options)
    grid = options.profile_grid()
    setup = sglang_backend.sglang_setup(models, hardware.device_name(device), options.dtype, options.tp_size)
    # The forwards' workers live in a child process: its exit gives their memory back
    # before the step design's SGLang engines start.
    sglang_backend.in_child_process(profile_sglang_forwards, options, models, setup, grid, on_cpu,
                                    what="SGLang's forwards")
    if not options.overhead_steps:
        print(report.OVERHEAD_SKIPPED)
        return
    design = step_design(options, grid)
    timer = sglang_backend.sglang_step_timer(models, grid, options.dtype, options.tp_size,
                                             measured_costs(store, setup, overhead=False).costs,
                                             max(design_new_tokens(design, shape) for shape in design.runs()), on_cpu)
    try:
        measure_overhead(options, store, setup, grid, design, timer)
    finally:
        timer.close()


def profile_sglang_forwards(options: ProfileOptions, models: SGLangModels, setup: Setup, grid: ProfileGrid,
                            on_cpu: bool) -> None:
    """SGLang's verify and draft-extend forwards on ``grid`` (every rank's workers
    built here), committed point by point."""
    engine = "CPU engine" if on_cpu else "CUDA"
    try:
        timers = sglang_backend.sglang_timers(models, grid, options.dtype, options.tp_size, on_cpu)
        measure_and_report(options, open_store(options), setup, timers, grid,
                           f"SGLang ({engine}), {options.dtype}, --tp-size {options.tp_size}")
    except RankLost as err:  # every point measured so far is committed; a rerun resumes
        raise AutotuneError(f"--tp-size {options.tp_size}: {err}", RUNTIME) from None


def measure_and_report(options: ProfileOptions, store: Store, setup: Setup, timers: TimerFactory, grid: ProfileGrid,
                       what: str) -> None:
    """Run the shared grid (``profile_grid``) for one setup and print its cost curves."""
    result = profile_grid(timers, store, setup, grid, max_age=options.profile_max_age, progress=not options.quiet)
    print_profiled(options, store, setup, grid, what, result)


def print_profiled(options: ProfileOptions, store: Store, setup: Setup, grid: ProfileGrid, what: str,
                   result: ProfileReport) -> None:
    """What one setup's profile measured, and its cost curves."""
    print(report.profiled(setup, options.label, what, result, store, grid))
    print(report.measured_curves(store, setup))


def step_design(options: ProfileOptions, grid: ProfileGrid) -> StepDesign:
    return StepDesign.for_grid(grid, options.overhead_warmup, options.overhead_steps)


def measure_overhead(options: ProfileOptions, store: Store, setup: Setup, grid: ProfileGrid, design: StepDesign,
                     timer: StepTimer) -> None:
    """Time whole engine steps of the step ``design`` (autotune/overhead.py) at every
    profiled batch size with ``timer``, resumable per run, and print the fitted
    overhead table.  Steps charged against forward tables this run changed are
    dropped first, and their runs timed again."""
    print(report.stale_steps_dropped(store.drop_steps_older_than_forwards(setup)))
    result = run_step_profile(timer, store, setup, grid, design, load_prompts(options.dataset),
                              progress=not options.quiet)
    print(report.steps_timed(result, design))
    print(report.fitted_overhead(store, setup))
