"""``cast-autotune``: command-line entry point.

    cast-autotune profile --gpu cpu            # measure f_T, f_D into the database
    cast-autotune collect --batch-size 1,4     # record full-expansion traces
    cast-autotune tune --gpu cpu               # Optuna over trace replay → profiles/cpu.yaml
    cast-autotune daemon --gpu cpu             # keep re-profiling / re-tuning / publishing
    cast-autotune analytic --gpu h100          # roofline profile for hardware we cannot measure
    cast-autotune profile|tune --backend sglang --tp-size 4 ...   # SGLang's forwards, runtime states
    cast-autotune show | plot | bench

Every flag value is checked here, at the edge; a bad one is reported in one line
naming the flag and the accepted range (exit 2), as are database and file
problems (exit 1).  No traceback for anything a user can cause.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sglang_cast.profile import PROFILE_DIR

from .errors import RUNTIME, USAGE, AutotuneError
from .grid import AUTO_N, ProfileGrid
from .labels import KNOWN_LABELS, check_label, check_label_syntax
from .preflight import add_preflight_parser
from .space import Grid, SearchSpace
from .store import DEFAULT_TIMEOUT_S, default_db_path

PROG = "cast-autotune"


# ------------------------------------------------------------------ flag types
def _bounds(kind: type, lo: float, hi: float) -> str:
    """``[lo, hi]`` as the error messages show it: integers in full, floats with ``:g``."""
    return f"[{lo}, {hi}]" if kind is int else f"[{lo:g}, {hi:g}]"


def number_in(kind: type, what: str, lo: float, hi: float):
    """argparse type: one ``kind`` value in [lo, hi]."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected {what} in {_bounds(kind, lo, hi)}, got {text!r}")
        return value
    return parse


def comma_list(text: str, kind: type, what: str, lo: float, hi: float, *, increasing: bool) -> tuple:
    """The one parser of comma-separated number flags (cast-autotune's and
    tools/bench.py's): ``kind`` values in [lo, hi], strictly increasing if asked.
    Raises ``ValueError`` saying what was expected and what came."""
    try:
        values = tuple(kind(v) for v in text.split(","))
    except ValueError:
        values = ()
    in_order = not increasing or list(values) == sorted(set(values))
    if not values or any(not lo <= v <= hi for v in values) or not in_order:
        order = "increasing " if increasing else ""
        raise ValueError(f"expected {order}comma-separated {what} in {_bounds(kind, lo, hi)}, got {text!r}")
    return values


def increasing_list(kind: type, what: str, lo: float, hi: float):
    """argparse type: strictly increasing comma-separated ``kind`` values in [lo, hi]."""
    def parse(text: str) -> tuple:
        try:
            return comma_list(text, kind, what, lo, hi, increasing=True)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def int_in(lo: int, hi: int):
    return number_in(int, "an integer", lo, hi)


def float_in(lo: float, hi: float):
    return number_in(float, "a number", lo, hi)


def int_list(lo: int, hi: int):
    return increasing_list(int, "integers", lo, hi)


def float_list(lo: float, hi: float):
    return increasing_list(float, "numbers", lo, hi)


def weight_formats(text: str) -> str | tuple[str, ...]:
    """argparse type of ``--weight-format``: ``auto`` or comma-separated formats (canonical, no repeats)."""
    if text == "auto":
        return text
    from sglang_cast.models.weights import WeightFormat

    try:
        formats = tuple(dict.fromkeys(str(WeightFormat.parse(part)) for part in text.split(",")))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected 'auto' or comma-separated formats: "
                                         f"{str(err).removeprefix('weight_format: ')}") from None
    return formats


def c_range(text: str) -> tuple[float, float]:
    values = float_list(1e-6, 1e6)(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX with 1e-06 <= MIN < MAX <= 1e+06, got {text!r}")
    return values


def n_points_mode(text: str) -> str | tuple[int, ...]:
    if text in ("auto", "all"):
        return text
    try:
        return int_list(1, 4096)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto', 'all' or increasing integers in [1, 4096], got {text!r}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: …)`` unless the help already says it or there is none;
    lists print as they are typed (``1,4,16``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default = action.default
        stated = "default" in (action.help or "")
        if stated or default is None or default is False or default in ("", argparse.SUPPRESS):
            return action.help
        if isinstance(default, tuple):
            return f"{action.help} (default: {','.join(map(str, default))})"
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Bad input → one line on stderr naming the flag, exit 2 (no usage dump)."""

    def error(self, message: str) -> None:
        self.exit(USAGE, f"{self.prog}: error: {message} (see --help)\n")


# ------------------------------------------------------------------ shared flags
def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", type=Path, default=default_db_path(),
                        help="SQLite database (measurements, traces, Optuna studies, publications); its directory "
                             "is created if missing; default under $SGLANG_CAST_CACHE or ~/.cache/sglang_cast")
    parser.add_argument("--db-timeout", type=float_in(0.01, 3600), default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for another process's write lock before giving up")


def add_models(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", default=None,
                        help="target model: HF directory or .gguf (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--draft-path", default=None,
                        help="EAGLE/EAGLE-3 head directory (default: the shipped head of the embedded model; a "
                             "random-weight EAGLE head while none is shipped)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where to run (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                        help="model dtype (as EngineArgs)")
    parser.add_argument("--random-draft-seed", type=int_in(0, 2**31 - 1), default=0,
                        help="seed of the random-weight head used when no trained head exists")
    parser.add_argument("--threads", type=int_in(1, 4096), default=None,
                        help="torch intra-op threads (default: torch's, as the server runs); part of the "
                             "measurement setup, since 1 and 2 threads are different machines")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_backend(parser: argparse.ArgumentParser, help_text: str) -> None:
    from .store import BACKENDS
    parser.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0], help=help_text)


def add_weight_formats(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--weight-format", dest="weight_formats", metavar="FORMATS", type=weight_formats,
                        default="auto",
                        help=f"target weight formats to {what}: 'auto' (on the CPU every candidate "
                             "sglang_cast/engine/format_choice.py knows: fp32, bf16, int8, int4/int8; on CUDA the "
                             "dense --dtype) or a comma-separated list such as fp32,int4/int8. Each format is its own "
                             "cost curve (target id '<model>@<format>') (default: auto)")


def add_tp_size(parser: argparse.ArgumentParser, help_text: str) -> None:
    from .sglang_backend import MAX_TP_SIZE
    parser.add_argument("--tp-size", type=int_in(1, MAX_TP_SIZE), default=1, help=help_text)


def add_runtime_states(parser: argparse.ArgumentParser) -> None:
    """The cap and the deployment ``tune --backend sglang`` sizes runtime states for."""
    from sglang_cast.sglang_plugin.state_cover import StateCap

    cap = StateCap()
    group = parser.add_argument_group(
        "SGLang runtime states (--backend sglang)",
        "The published profile names the (depth, verify width) states SGLang builds: the fewest that run the "
        "tuned policy's replayed iterations exactly, under this cap (stated in the profile).")
    group.add_argument("--max-states", type=int_in(2, 64), default=cap.max_states,
                       help="most runtime states, SGLang's startup state and the width-2 floor included")
    group.add_argument("--max-state-memory", type=float_in(0.001, 1), default=cap.max_memory_share,
                       help="share of one GPU's memory the states beyond the startup one may take")
    group.add_argument("--state-coverage", type=float_in(0.5, 1), default=cap.coverage,
                       help="share of replayed iterations to run in exactly their own state (the rest round up)")
    group.add_argument("--gpu-memory-gb", type=float_in(1, 4096), default=None,
                       help="one serving GPU's total memory in GiB, as nvidia-smi reports it (default: this "
                            "machine's CUDA GPU 0; without one, the states are sized for SGLang's CPU engine, "
                            "where they hold no graphs or attention workspaces)")
    group.add_argument("--serve-context-length", type=int_in(1, 1 << 24), default=None,
                       help="SGLang --context-length of the deployment; the states' buffers grow with it (default: "
                            "the target config.json's max_position_embeddings, as SGLang)")
    group.add_argument("--max-running-requests", type=int_in(1, 1 << 16), default=48,
                       help="SGLang --max-running-requests of the deployment: sets the graph batch sizes each "
                            "state is captured at (default: 48, CAST's)")


def add_label(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--gpu", "--label", dest="label", required=required,
                        help=f"profile label; published as profiles/<label>.yaml. Known labels: "
                             f"{', '.join(sorted(KNOWN_LABELS))}")
    parser.add_argument("--force-label", action="store_true",
                        help="accept a label that does not match the detected hardware (or an unknown label)")


def add_grid(parser: argparse.ArgumentParser) -> None:
    defaults = ProfileGrid()
    parser.add_argument("--batch-sizes", type=int_list(1, 1024), default=defaults.batch_sizes,
                        help="batch sizes B to profile, comma-separated")
    parser.add_argument("--ctx-bucket", type=int_in(1, 1 << 20), default=defaults.ctx_bucket,
                        help="context bucket width L (contexts L, 2L, ..., M*L are timed)")
    parser.add_argument("--ctx-buckets", type=int_in(1, 256), default=defaults.ctx_buckets,
                        help="number of context buckets M")
    parser.add_argument("--max-n", type=int_in(2, 4096), default=defaults.max_n,
                        help="largest n (new tokens per sequence) for the target; verifying k draft tokens feeds k+1")
    parser.add_argument("--draft-max-n", type=int_in(2, 4096), default=defaults.draft_max_n,
                        help="largest n for the draft (widest layer = top-k; catch-up = depth + 1)")
    parser.add_argument("--n-points", type=n_points_mode, default=defaults.n_mode,
                        help=f"which n to time: 'auto' ({','.join(map(str, AUTO_N))} up to N, plus N), 'all' "
                             "(1..N), or a list; other n are interpolated linearly")
    parser.add_argument("--warmup", type=int_in(0, 100), default=defaults.warmup,
                        help="untimed rounds per row (a row = one role, B and c; a round times each of its n once)")
    parser.add_argument("--repeats", type=int_in(1, 1000), default=defaults.repeats,
                        help="timed rounds per row: samples per point (median, p10, p90 stored)")
    parser.add_argument("--quick", action="store_true",
                        help="small grid: B 1,2; one bucket of 256; n in 1,2,4,8,16; 1 warm-up and 3 timed rounds")
    parser.add_argument("--max-age", type=float_in(0, 1e9), default=None,
                        help="re-measure points older than this many seconds (default: never; a rerun only "
                             "measures points missing for this device/model pair/threads/software versions)")


def add_overhead(parser: argparse.ArgumentParser, dataset: bool = True) -> None:
    parser.add_argument("--overhead-steps", type=int_in(0, 10000), default=8,
                        help="timed whole engine steps per run of the host-overhead step design (plain decoding and "
                             "EAGLE-2 shapes of depth 1..6 at every batch size; --backend sglang times SGLang's own "
                             "iterations of the CAST worker, one SGLang engine per shape); 0 skips it")
    parser.add_argument("--overhead-warmup", type=int_in(0, 1000), default=2,
                        help="untimed steps at the start of every step-design run (first use of its shapes)")
    if not dataset:  # the subcommand has its own --dataset (the daemon's tuning prompts serve both)
        return
    parser.add_argument("--dataset", type=Path, default=None,
                        help="prompts the host-overhead steps decode (default: autotune/prompts.txt, disjoint from "
                             "the benchmarks)")


def add_space(parser: argparse.ArgumentParser) -> None:
    defaults = SearchSpace()
    parser.add_argument("--buckets", type=int_list(1, 4096), default=(1, 4, 16),
                        help="max_batch_size of each batch-size bucket; traces go to the first bucket covering "
                             "their batch size")
    parser.add_argument("--trials", type=int_in(1, 100000), default=100, help="Optuna trials per bucket")
    parser.add_argument("--c-range", type=c_range, default=(defaults.c_min, defaults.c_max),
                        help="MIN,MAX of the log-uniform search range of C1, C2 and C3")
    parser.add_argument("--top-k", type=int_in(1, 256), default=defaults.top_k, help="largest top-k searched")
    parser.add_argument("--max-depth", type=int_in(1, 256), default=defaults.max_depth, help="largest depth searched")
    parser.add_argument("--max-tokens", type=int_in(2, 4096), default=defaults.max_tokens,
                        help="largest token budget m (num_verify_tokens, root included) searched")
    parser.add_argument("--fifo-max", type=int_in(1, 1024), default=defaults.fifo_max,
                        help="largest depth-pruning FIFO length searched")
    parser.add_argument("--study", default="",
                        help="study name prefix (studies are <prefix>-b<bucket>); reuse one to resume it "
                             "(default: <label>-<UTC time>)")
    parser.add_argument("--seed", type=int_in(0, 2**31 - 1), default=0, help="TPE sampler seed")
    parser.add_argument("--max-traces", type=int_in(1, 10**7), default=200,
                        help="traces replayed per bucket (evenly spaced sample); trial time is linear in it")
    parser.add_argument("--trace-dataset", default=None, help="tune only on traces of this dataset name")
    add_confirm(parser, default_prompts=4, default_tokens=32)
    parser.add_argument("--live-margin", type=float_in(0.001, 10), default=0.15,
                        help="when a bucket's live CAST or plain steps take more than this fraction off what the "
                             "cost model charges for those same steps, the host overhead is refitted from the live "
                             "steps, the bucket re-tuned and confirmed once more")
    parser.add_argument("--output", type=Path, default=None,
                        help="profile path (default: <repo>/profiles/<label>.yaml, where the server looks)")


def add_confirm(parser: argparse.ArgumentParser, default_prompts: int, default_tokens: int) -> None:
    parser.add_argument("--dataset", type=Path, default=None,
                        help="prompts for the live run: .jsonl (first of 'turns', or prompt/instruction/text) or "
                             "one prompt per line (default: autotune/prompts.txt)")
    parser.add_argument("--confirm-prompts", type=int_in(0, 10000), default=default_prompts,
                        help="prompts decoded live per bucket, with the tuned CAST settings and with plain decoding "
                             "(at least the batch size; 0 skips the live gate)")
    parser.add_argument("--live-rounds", type=int_in(2, 100), default=3,
                        help="interleaved live rounds of CAST and of plain decoding per bucket (medians compared)")
    parser.add_argument("--confirm-max-new-tokens", type=int_in(1, 100000), default=default_tokens,
                        help="tokens generated per prompt in the live run")
    parser.add_argument("--context-length", type=int_in(16, 1 << 20), default=2048,
                        help="engine context length (prompt + generated tokens)")


# ------------------------------------------------------------------ helpers
def grid_from(args) -> ProfileGrid:
    if args.quick:
        return ProfileGrid.quick()
    return ProfileGrid(batch_sizes=args.batch_sizes, ctx_bucket=args.ctx_bucket, ctx_buckets=args.ctx_buckets,
                       max_n=args.max_n, draft_max_n=args.draft_max_n, n_mode=args.n_points, warmup=args.warmup,
                       repeats=args.repeats)


def space_from(args) -> SearchSpace:
    return SearchSpace(c_min=args.c_range[0], c_max=args.c_range[1], max_depth=args.max_depth, top_k=args.top_k,
                       max_tokens=args.max_tokens, fifo_max=args.fifo_max)


def open_store(args):
    from .store import Store
    return Store(args.db, args.db_timeout)


def resolve_device(args) -> str:
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        raise AutotuneError("--device: cuda requested but no CUDA device is available (accepted here: cpu)")
    return args.device or ("cuda" if torch.cuda.is_available() else "cpu")


def checked_label(args, device: str) -> str:
    from sglang_cast.hardware import device_name
    check_label(args.label, device, device_name(device), args.force_label)
    return args.label


def formats_for(args, device: str) -> tuple[str, ...]:
    """``--weight-format`` as a list: ``auto`` is every CPU candidate, or dense on CUDA."""
    from sglang_cast.engine.format_choice import CANDIDATES, DENSE

    if args.weight_formats != "auto":
        if device != "cpu" and args.weight_formats != (DENSE,):
            raise AutotuneError(f"--weight-format: packed formats run on the CPU only; use auto or {DENSE} on {device}")
        return args.weight_formats
    return CANDIDATES if device == "cpu" else (DENSE,)


def format_name(args, weight_format: str) -> str:
    """A format spec named for what runs (``fp32`` of a bfloat16 model is ``bf16``)."""
    from sglang_cast.engine.build import DTYPES
    from sglang_cast.engine.format_choice import running_format
    return running_format(weight_format, DTYPES[args.dtype])


def load_pair(args, device: str, weight_format: str = "fp32"):
    import torch

    from .models import load_model_pair
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    pair = load_model_pair(args.model_path, args.draft_path, device, args.dtype, args.random_draft_seed,
                           weight_format)
    if pair.random_draft and weight_format == "fp32":
        print(f"{PROG}: note: no trained draft head for this model; using a random-weight EAGLE head "
              f"({pair.draft_id}): its forward costs are those of an EAGLE-1/2 head of this shape, its acceptance "
              "is near zero", file=sys.stderr)
    return pair


def current_setup(pair, device: str, backend: str = "native", tp_size: int = 1):
    from sglang_cast.hardware import device_name

    from .store import Setup
    return Setup.current(device_name(device), pair.target_id, pair.draft_id, pair.dtype, backend, tp_size)


def tune_config(args, label: str, formats: tuple[str, ...] = ("fp32",), runtime_states=None):
    from .workflow import TuneConfig
    # A profile tuned on SGLang's cost curve is what `launch_server --backend sglang` looks for first.
    folder = PROFILE_DIR / "sglang" if getattr(args, "backend", "native") == "sglang" else PROFILE_DIR
    return TuneConfig(label=label, output=args.output or folder / f"{label}.yaml", buckets=args.buckets,
                      trials=args.trials, space=space_from(args), study_prefix=args.study, seed=args.seed,
                      max_traces=args.max_traces, dataset=args.trace_dataset, confirm_prompts=args.confirm_prompts,
                      confirm_max_new_tokens=args.confirm_max_new_tokens, context_length=args.context_length,
                      weight_formats=formats, live_rounds=args.live_rounds, live_margin=args.live_margin,
                      runtime_states=runtime_states)


def require_one_device(args) -> None:
    """``--tp-size`` above 1 is SGLang's layout; the native engine runs on one device."""
    if args.backend != "sglang" and args.tp_size > 1:
        raise AutotuneError(f"--tp-size: the native engine runs on one device (accepted with --backend native: 1, "
                            f"got {args.tp_size}); tensor parallelism is SGLang's: pass --backend sglang", USAGE)


def tuned_pair(args, device: str):
    """The pair ``tune`` keys traces and rows by: loaded in the native engine when
    its live gate runs, else (``--backend sglang --confirm-prompts 0``) its ids only."""
    if args.backend == "sglang" and args.confirm_prompts == 0:
        from .sglang_backend import pair_ids, sglang_models
        return pair_ids(sglang_models(args.model_path, args.draft_path), args.dtype, device)
    return load_pair(args, device)


def state_sizing(args, device: str):
    """``tune --backend sglang``: how the published profile's runtime states are sized
    (for SGLang's CPU engine when tune runs on the CPU without --gpu-memory-gb)."""
    import torch

    from sglang_cast.sglang_plugin.memory_plan import GIB
    from sglang_cast.sglang_plugin.state_cover import StateCap

    from .sglang_backend import cpu_state_sizing, runtime_state_sizing, sglang_models
    models = sglang_models(args.model_path, args.draft_path)
    cap = StateCap(args.max_states, args.max_state_memory, args.state_coverage)
    gpu_gib = args.gpu_memory_gb
    if gpu_gib is None:
        if device != "cuda":
            return cpu_state_sizing(models, cap)
        gpu_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    return runtime_state_sizing(models, gpu_gib, args.serve_context_length, args.max_running_requests,
                                args.tp_size, cap)


# ------------------------------------------------------------------ commands
def cmd_profile(args) -> int:
    require_one_device(args)
    if args.backend == "sglang":
        profile_sglang(args)
        return 0
    device = resolve_device(args)
    checked_label(args, device)
    formats = formats_for(args, device)
    store = open_store(args)
    for fmt in formats:
        profile_format(args, store, device, fmt)
    if len(formats) > 1:
        print(f"profiled weight formats {', '.join(formats)}: `cast-autotune tune --weight-format "
              f"{','.join(formats)}` tunes each and publishes the fastest")
    return 0


def profile_format(args, store, device: str, weight_format: str) -> None:
    """Measure (or resume) one weight format's grid on the native engine and print its curves."""
    from .costs import measured_costs
    from .overhead import NativeStepTimer
    from .profiler import native_timers

    pair = load_pair(args, device, weight_format)
    setup = current_setup(pair, device)
    grid = grid_from(args)
    measure_and_report(args, store, setup, native_timers(pair), grid,
                       f"weight format {format_name(args, weight_format)}")
    if args.overhead_steps:
        measure_overhead(args, store, setup, grid, step_design(args, grid),
                         NativeStepTimer(pair, measured_costs(store, setup, overhead=False).costs))
    else:
        print("host overhead: not measured (--overhead-steps 0)")


def step_design(args, grid):
    from .overhead import StepDesign

    return StepDesign.for_grid(grid, args.overhead_warmup, args.overhead_steps)


def measure_overhead(args, store, setup, grid, design, timer) -> None:
    """Time whole engine steps of the step ``design`` (autotune/overhead.py) at every
    profiled batch size with ``timer``, resumable per run, and print the fitted
    overhead table."""
    from .costs import measured_costs
    from .overhead import run_step_profile
    from .prompts import load_prompts
    from .report import overhead_table

    report = run_step_profile(timer, store, setup, grid, design, load_prompts(args.dataset), progress=not args.quiet)
    print(f"host overhead: {report.runs} runs of whole steps timed ({report.steps} steps: plain decoding and "
          f"{len(design.shapes)} EAGLE-2 shapes per batch size), {report.skipped} runs already stored")
    if report.stalls():
        print(f"host overhead: {report.stalls()}")
    print(overhead_table(measured_costs(store, setup).costs.overhead))


def profile_sglang(args) -> None:
    """Measure (or resume) SGLang's own forwards, then its whole iterations for the
    host-overhead table (dense ``--dtype``), on a CUDA GPU or, without one, on
    SGLang's CPU engine; what cannot run is refused before anything loads."""
    import torch

    from sglang_cast.hardware import device_name

    from .costs import measured_costs
    from .overhead import design_new_tokens
    from .sglang_backend import (check_sglang_backend, enter_sglang_cpu_engine, in_child_process, sglang_on_cpu,
                                 sglang_setup, sglang_step_timer)
    models = check_sglang_backend(args.model_path, args.draft_path, args.device, torch.cuda.is_available(),
                                  args.tp_size, torch.cuda.device_count())
    on_cpu = sglang_on_cpu(args.device, torch.cuda.is_available())
    device = "cpu" if on_cpu else "cuda"
    checked_label(args, device)
    dense_format_only(args)
    if on_cpu:
        enter_sglang_cpu_engine()
    store = open_store(args)
    grid = grid_from(args)
    setup = sglang_setup(models, device_name(device), args.dtype, args.tp_size)
    # The forwards' workers live in a child process: its exit gives their memory back
    # before the step design's SGLang engines start.
    in_child_process(profile_sglang_forwards, args, models, setup, grid, on_cpu, what="SGLang's forwards")
    if not args.overhead_steps:
        print("host overhead: not measured (--overhead-steps 0)")
        return
    design = step_design(args, grid)
    timer = sglang_step_timer(models, grid, args.dtype, args.tp_size, measured_costs(store, setup, overhead=False).costs,
                              max(design_new_tokens(design, shape) for shape in design.runs()), on_cpu)
    try:
        measure_overhead(args, store, setup, grid, design, timer)
    finally:
        timer.close()


def dense_format_only(args) -> None:
    """SGLang loads the checkpoint's dense weights: no packed format to profile."""
    from sglang_cast.engine.format_choice import DENSE

    if args.weight_formats not in ("auto", (DENSE,)):
        raise AutotuneError(f"--weight-format: SGLang loads the checkpoint's dense weights (accepted with --backend "
                            f"sglang: auto or {DENSE}, got {','.join(args.weight_formats)})", USAGE)


def profile_sglang_forwards(args, models, setup, grid, on_cpu: bool) -> None:
    """SGLang's verify and draft-extend forwards on ``grid`` (every rank's workers
    built here), committed point by point."""
    from .sglang_backend import sglang_timers

    from sglang_cast.sglang_plugin.profile_forwards import RankLost
    try:
        measure_and_report(args, open_store(args), setup, sglang_timers(models, grid, args.dtype, args.tp_size, on_cpu),
                           grid, f"SGLang ({'CPU engine' if on_cpu else 'CUDA'}), {args.dtype}, --tp-size {args.tp_size}")
    except RankLost as err:  # every point measured so far is committed; a rerun resumes
        raise AutotuneError(f"--tp-size {args.tp_size}: {err}", RUNTIME) from None


def measure_and_report(args, store, setup, timers, grid, what: str) -> None:
    """Run the shared grid (``profile_grid``) for one setup and print its cost curves."""
    from .costs import measured_costs
    from .profiler import profile_grid
    from .report import cost_curves

    max_age = timedelta(seconds=args.max_age) if args.max_age is not None else None
    report = profile_grid(timers, store, setup, grid, max_age=max_age, progress=not args.quiet)
    print(f"profiled {setup.device} ({args.label}), {what}: {report.measured} points measured, "
          f"{report.skipped} already in {store.path}")
    for role in ("target", "draft"):
        skipped = grid.interpolated(role)
        if skipped:
            print(f"{role}: timed n = {list(grid.n_values(role))}; {len(skipped)} other n in 1..{grid.max_n_of(role)} "
                  "are interpolated when cost tables are built")
    costs = measured_costs(store, setup)
    rows = store.measurements(setup)
    print(cost_curves(rows, "target") + "\n\n" + cost_curves(rows, "draft"))
    for role, info in (("target", costs.target), ("draft", costs.draft)):
        if info.left_out:
            print(f"{role}: batch sizes {list(info.left_out)} have incomplete rows and are left out; rerun to finish")


def cmd_collect(args) -> int:
    from sglang_cast.hardware import device_name

    from .collect import CollectConfig, collect, full_shape
    from .prompts import load_prompts

    device = resolve_device(args)
    prompts = load_prompts(args.dataset).head(args.num_prompts)
    store = open_store(args)
    pair = load_pair(args, device)
    config = CollectConfig(full_shape(args.top_k, args.max_depth), args.batch_size, args.max_new_tokens,
                           args.context_length)
    report = collect(pair, store, device_name(device), prompts, config, progress=not args.quiet)
    print(f"recorded {report.iterations} iterations ({report.tokens} tokens) of {len(prompts.texts)} prompts from "
          f"{prompts.name} at batch sizes {list(args.batch_size)} with top_k {args.top_k}, depth {args.max_depth} "
          f"into {store.path} (runs {', '.join(r[:8] for r in report.run_ids)})")
    return 0


def cmd_tune(args) -> int:
    from sglang_cast.engine.format_choice import DENSE

    from .prompts import load_prompts
    from .workflow import tune_and_publish

    if args.calibrate_from is not None and args.backend != "native":
        raise AutotuneError("--calibrate-from: re-tunes for the native engine (the anchors time its forwards); "
                            "drop --backend sglang", USAGE)
    require_one_device(args)
    device = resolve_device(args)
    label = checked_label(args, device)
    sizing = state_sizing(args, device) if args.backend == "sglang" else None
    format_costs = None
    if args.calibrate_from is not None:
        format_costs = profile_fitted_here(args, device)
        formats = tuple(format_costs)
    elif args.backend == "sglang":
        dense_format_only(args)
        formats = (DENSE,)
    else:
        formats = formats_for(args, device)
    config = tune_config(args, label, formats, sizing)
    prompts = load_prompts(args.dataset)
    store = open_store(args)
    pair = tuned_pair(args, device)
    outcome = tune_and_publish(pair, store, current_setup(pair, device, args.backend, args.tp_size), config, prompts,
                               load_format=lambda fmt: load_pair(args, device, fmt), progress=not args.quiet,
                               format_costs=format_costs)
    for tuning in outcome.formats:
        rates = ", ".join(f"bucket <= {b}: {r}" for b, r in tuning.summary()["replay_tokens_per_s"].items())
        print(f"weight format {format_name(args, tuning.weight_format)}: geometric mean {tuning.score:.2f} tokens/s "
              f"replayed ({rates})")
    if outcome.not_profiled:
        print(f"not profiled, so not tuned: {', '.join(outcome.not_profiled)} (run `cast-autotune profile "
              f"--weight-format {','.join(outcome.not_profiled)}`)")
    print(f"weight format {format_name(args, outcome.weight_format)} replays fastest; its buckets, as published:")
    for result in outcome.results:
        s = result.summary()
        b = result.settings
        print(f"bucket <= {b.max_batch_size}: {s['replay_tokens_per_s']} tokens/s replayed on {s['traces']} traces "
              f"(vanilla {s['baselines_tokens_per_s']['vanilla']}, eagle2 {s['baselines_tokens_per_s']['eagle2']}); "
              f"best trial {result.trial} of {result.study}: top_k {b.shape.top_k}, depth {b.shape.max_depth}, "
              f"m {b.shape.num_verify_tokens}, C1 {b.thresholds.c1:.3g}, C2 {b.thresholds.c2:.3g}, "
              f"C3 {b.thresholds.c3:.3g}, fifo {b.fifo_len}; speculate: {str(b.speculate).lower()}"
              + (f" (off by {result.off_by})" if result.off_by else ""))
        c = outcome.confirmations.get(b.max_batch_size)
        if c is not None:
            print(f"  live gate B={c.batch_size}: CAST {c.live_cast_tokens_per_s:.2f} tokens/s live vs "
                  f"{c.predicted_cast_tokens_per_s:.2f} predicted ({c.live_over_predicted:.0%}; "
                  f"{c.live_over_predicted_at_profile_speed:.0%} at the profile's speed); plain "
                  f"{c.live_plain_tokens_per_s:.2f} live vs {c.predicted_plain_tokens_per_s:.2f} predicted "
                  f"({c.plain_live_over_predicted:.0%}; {c.plain_live_over_predicted_at_profile_speed:.0%}); "
                  f"live steps took {c.cast_measured_over_charged:.0%} (CAST) and "
                  f"{c.plain_measured_over_charged:.0%} (plain) of what the cost model charged for them; "
                  f"live CAST/plain {c.live_speedup:.2f}x (predicted "
                  f"{c.predicted_speedup:.2f}x; medians of {c.rounds} interleaved rounds; the machine ran "
                  f"{c.speed_factor:.2f}x the profiled forward time)")
    if sizing is not None:
        from .sglang_backend import states_report
        print(states_report(outcome.published.profile, sizing))
    print(f"published {outcome.published.path} (version {outcome.published.version})")
    return 0


def profile_fitted_here(args, device: str) -> dict:
    """``tune --calibrate-from PROFILE``: the profile's tables fitted to forwards timed
    here in the profile's weight format, keyed by that format."""
    from sglang_cast.engine.table_calibration import calibrate
    from sglang_cast.profile import ProfileError, load_profile

    from .costs import calibrated_costs
    try:
        profile = load_profile(args.calibrate_from).profile
    except ProfileError as err:
        raise AutotuneError(f"--calibrate-from: {err}") from None
    weight_format = profile.weight_format or "fp32"
    if args.weight_formats not in ("auto", (weight_format,)):
        raise AutotuneError(f"--weight-format: --calibrate-from tunes the profile's own format ({weight_format}); "
                            "drop --weight-format or pass that one", USAGE)
    pair = load_pair(args, device, weight_format)
    costs = profile.settings.costs
    served = calibrate(pair.target, pair.draft, costs, max(args.buckets), pair.graph_backend)
    print(f"calibrated {args.calibrate_from} ({weight_format}) to this machine in {served.timings.seconds:.1f} s: "
          f"target x{served.fit.target.scale:.3f}, draft x{served.fit.draft.scale:.3f} (held-out anchors off by "
          f"{_percent(served.fit.target.check_error)} / {_percent(served.fit.draft.check_error)})")
    return {weight_format: calibrated_costs(str(args.calibrate_from), costs, served.fit, served.report(costs))}


def _percent(error: float | None) -> str:
    return "-" if error is None else f"{100 * error:.0f} %"


def server_watch(args) -> ServerWatch | None:
    """``--server-url``: the serving instance whose live calibration the daemon follows."""
    from .daemon import ServerWatch

    if args.server_url is None:
        if args.server_api_key is not None:
            raise AutotuneError("--server-api-key: needs --server-url", USAGE)
        return None
    try:
        return ServerWatch(args.server_url, args.drift_margin, args.server_api_key)
    except ValueError as err:
        raise AutotuneError(f"--server-url: {err}", USAGE) from None


def cmd_daemon(args) -> int:
    from .daemon import Daemon, DaemonConfig
    from .prompts import load_prompts

    device = resolve_device(args)
    label = checked_label(args, device)
    weight_formats = formats_for(args, device)
    config = DaemonConfig(tune=tune_config(args, label, weight_formats), grid=grid_from(args),
                          interval_s=args.interval, poll_s=args.poll, once=args.once,
                          profile_max_age=timedelta(seconds=args.max_age) if args.max_age is not None else None,
                          server=server_watch(args), overhead_warmup=args.overhead_warmup,
                          overhead_steps=args.overhead_steps)
    prompts = load_prompts(args.dataset)
    store = open_store(args)
    pair = load_pair(args, device)  # the fp32 reference: traces are keyed by it
    formats = {}
    for fmt in weight_formats:
        fmt_pair = pair if fmt == "fp32" else load_pair(args, device, fmt)
        formats[fmt] = (fmt_pair, current_setup(fmt_pair, device))
    daemon = Daemon(pair, store, current_setup(pair, device), config, prompts, progress=not args.quiet,
                    formats=formats)
    daemon.install_signal_handlers()
    daemon.run()
    return 0


def cmd_analytic(args) -> int:
    from .analytic import analytic_profile
    from .publish import publish

    label = check_label_syntax(args.label)
    profile = analytic_profile(label, args.model_path, args.draft_path, tp_size=args.tp_size)
    store = open_store(args) if args.record else None
    name = label if args.tp_size == 1 else f"{label}-tp{args.tp_size}"
    published = publish(profile, args.output or PROFILE_DIR / f"{name}.yaml", store)
    costs = profile.settings.costs
    per_gpu = f", per GPU of --tp-size {args.tp_size}" if args.tp_size > 1 else ""
    print(f"wrote {published.path} (version {published.version}): {profile.device}{per_gpu}, f_T(1, 512, 1) = "
          f"{costs.target(1, 512, 1):.4f} ms, f_T(1, 512, 64) = {costs.target(1, 512, 64):.4f} ms (roofline)")
    return 0


def cmd_show(args) -> int:
    from .report import show

    print(show(open_store(args), args.setup, args.study, args.trials))
    return 0


def cmd_plot(args) -> int:
    from .plots import plot_cost_curves, plot_histories
    from .report import study_histories

    store = open_store(args)
    args.out.mkdir(parents=True, exist_ok=True)
    setups = store.setups()
    written = []
    if setups:
        setup = setups[min(args.setup, len(setups) - 1)]
        rows = store.measurements(setup)
        context = args.context or min(r.context_len for r in rows)
        if context not in {r.context_len for r in rows}:
            raise AutotuneError(f"--context: no measurements at {context}; measured: "
                                f"{sorted({r.context_len for r in rows})}")
        title = (f"{setup.device}, threads={setup.threads} — {setup.target_model} + {setup.draft_model} "
                 f"({setup.dtype}, torch {setup.torch_version})")
        written.append(plot_cost_curves(rows, context, title, args.out / "cost_curves.png"))
    histories = study_histories(store, args.study)[-args.max_studies:]
    if histories:
        written.append(plot_histories(histories, args.out / "tuning_history.png"))
    if not written:
        raise AutotuneError(f"--db: nothing to plot in {store.path} (no measurements, no studies)")
    print("\n".join(f"wrote {p}" for p in written))
    return 0


def cmd_bench(args) -> int:
    from .bench import BenchConfig, run_bench
    from .prompts import load_prompts

    device = resolve_device(args)
    grid = Grid(args.grid_c, args.grid_depths, args.grid_top_ks, args.grid_budgets, args.grid_fifo)
    trials = args.trials or max(1, int(0.1 * len(grid)))
    lo, hi = args.batch_sizes[0], args.batch_sizes[-1]
    study = args.study or f"bench-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    config = BenchConfig(lo, hi, grid, trials, args.seeds, args.max_traces, args.confirm_prompts,
                         args.confirm_max_new_tokens, args.context_length, study, args.live_rounds)
    prompts = load_prompts(args.dataset)
    store = open_store(args)
    pair = load_pair(args, device)
    result = run_bench(pair, store, current_setup(pair, device), config, prompts, progress=not args.quiet)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    return 0


# ------------------------------------------------------------------ parser
def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    fmt = HelpFormatter

    p = commands.add_parser("profile", help="measure f_T and f_D on a grid into the database", formatter_class=fmt,
                            description="Time target and draft forwards over batch sizes x context buckets x n "
                                        "(warm-up, repeats, median and p10/p90); every point is committed at once, "
                                        "and a rerun measures only missing points.")
    add_label(p)
    add_models(p)
    add_weight_formats(p, "profile, one after another (each resumable)")
    add_grid(p)
    add_overhead(p)
    add_db(p)
    add_backend(p, "whose forwards to time: 'native' (this project's engine) or 'sglang' (SGLang's own target-verify "
                   "and draft-extend forwards through its model runner; needs a CUDA GPU, SGLang 0.5.23, "
                   "--model-path and --draft-path; see docs/gpu.md)")
    add_tp_size(p, "--backend sglang: GPUs of this machine each forward is sharded over (SGLang's --tp-size; one "
                   "rank per GPU; the model's attention and KV heads must divide over them); the rows are keyed by "
                   "it, as a TP-4 forward is another cost curve")
    p.set_defaults(run=cmd_profile)

    p = commands.add_parser("collect", help="record full-expansion traces (greedy) into the database",
                            formatter_class=fmt,
                            description="Decode a prompt set with trace recording on (full EAGLE-2 expansion, every "
                                        "node verified); tune replays any CAST tree inside it.")
    add_models(p)
    p.add_argument("--dataset", type=Path, default=None,
                   help="prompts: .jsonl (first of 'turns', or prompt/instruction/text) or one prompt per line "
                        "(default: autotune/prompts.txt, written for tuning and disjoint from the benchmarks)")
    p.add_argument("--num-prompts", type=int_in(1, 10**6), default=16, help="use the first N prompts")
    p.add_argument("--max-new-tokens", type=int_in(1, 100000), default=64, help="tokens generated per prompt")
    p.add_argument("--batch-size", type=int_list(1, 1024), default=(1,),
                   help="engine max batch size; a list records one run per size")
    p.add_argument("--top-k", type=int_in(1, 256), default=SearchSpace().top_k,
                   help="recorded top-k K (must be >= the tuning space's top-k)")
    p.add_argument("--max-depth", type=int_in(1, 256), default=SearchSpace().max_depth,
                   help="recorded depth H (must be >= the tuning space's depth)")
    p.add_argument("--context-length", type=int_in(16, 1 << 20), default=2048, help="engine context length")
    add_db(p)
    p.set_defaults(run=cmd_collect)

    p = commands.add_parser("tune", help="Optuna over trace replay per bucket, live check, publish the profile",
                            formatter_class=fmt,
                            description="Objective: replay(traces, cast).tokens_per_s with the measured cost tables. "
                                        "The best trial is run live before the profile is written.")
    add_label(p)
    add_models(p)
    add_weight_formats(p, "tune on the same fp32 traces; the one whose tuned trees replay fastest (geometric "
                          "mean over buckets) is published; formats without measurements are skipped and named")
    add_space(p)
    add_db(p)
    add_backend(p, "whose measured cost curves to tune on (as `profile --backend` recorded them); 'sglang' also "
                   "writes the profile's runtime states and parallel layout")
    add_tp_size(p, "--backend sglang: the --tp-size the rows were profiled at and the profile will serve")
    add_runtime_states(p)
    p.add_argument("--calibrate-from", type=Path, default=None, metavar="PROFILE",
                   help="a quick re-tune for this machine from another machine's profile: its forward tables are "
                        "fitted to a few forwards timed here (seconds, as the server's --cast-calibrate does), in "
                        "its weight format, and the tuner and the live gate run on them and the traces already in "
                        "--db; nothing is profiled and no trace is recorded (native engine)")
    p.set_defaults(run=cmd_tune)

    p = commands.add_parser("daemon", help="re-profile and re-tune on a schedule or when traces arrive",
                            formatter_class=fmt,
                            description="Each step: profile missing/stale points, tune, confirm live, publish. "
                                        "SIGTERM stops after the current profile row or trial; an interrupted step "
                                        "publishes nothing.")
    add_label(p)
    add_models(p)
    add_weight_formats(p, "profile and tune at each step; the one whose tuned trees replay fastest is published")
    add_grid(p)
    add_overhead(p, dataset=False)
    add_space(p)
    add_db(p)
    p.add_argument("--interval", type=float_in(1, 1e9), default=3600.0, help="seconds between scheduled steps")
    p.add_argument("--poll", type=float_in(0.01, 1e6), default=30.0, help="seconds between trace-count checks")
    p.add_argument("--once", action="store_true", help="run one step and exit")
    p.add_argument("--server-url", default=None,
                   help="follow a running `python -m sglang_cast.launch_server` (http://host:port): when its "
                        "/server_info shows live / predicted iteration cost outside 1 ± --drift-margin in a bucket, "
                        "or its live gate switched a bucket off, re-profile every point and re-tune (once per "
                        "served profile version); the server hot-reloads what is published")
    p.add_argument("--drift-margin", type=float_in(0.01, 10.0), default=0.15,
                   help="live / predicted outside 1 ± this is drift (with --server-url)")
    p.add_argument("--server-api-key", default=None,
                   help="the server's --admin-api-key (or --api-key) when its /server_info is guarded")
    p.set_defaults(run=cmd_daemon)

    p = commands.add_parser("analytic", help="write a roofline profile for a GPU that cannot be measured here",
                            formatter_class=fmt,
                            description="f(B,c,n) = max(bytes/BW, flops/FLOPS) from published bandwidth and dense "
                                        "BF16 FLOP rate; with --tp-size N one GPU's shard plus the all-reduces "
                                        "between them; see docs/autotune.md.")
    from .analytic import ANALYTIC_GPUS
    p.add_argument("--gpu", "--label", dest="label", required=True,
                   help=f"the GPU whose published bandwidth and FLOP rate price the forwards: "
                        f"{', '.join(sorted(ANALYTIC_GPUS))}")
    add_tp_size(p, "GPUs the model is sharded over (SGLang's --tp-size): the profile prices one of them and serves "
                   "only that layout; the default output is then profiles/<label>-tp<N>.yaml")
    p.add_argument("--model-path", default=None, help="target model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft-path", default=None, help="draft head (default: shipped head, else an assumed EAGLE head)")
    p.add_argument("--output", type=Path, default=None,
                   help="profile path (default: <repo>/profiles/<label>.yaml, where the server looks, or "
                        "<label>-tp<N>.yaml with --tp-size N > 1)")
    p.add_argument("--record", action="store_true", help="also record the publication in --db")
    add_db(p)
    p.set_defaults(run=cmd_analytic)

    p = commands.add_parser("show", help="print cost curves, traces, tuning history and publications",
                            formatter_class=fmt)
    add_db(p)
    p.add_argument("--setup", type=int_in(0, 10**6), default=0,
                   help="which measurement setup's curves to print (0 = most recently measured)")
    p.add_argument("--study", default="", help="only studies whose name contains this")
    p.add_argument("--trials", action="store_true", help="print every trial with the best-so-far")
    p.set_defaults(run=cmd_show)

    p = commands.add_parser("plot", help="PNG plots of cost curves and tuning history", formatter_class=fmt)
    add_db(p)
    p.add_argument("--out", type=Path, default=Path("autotune-plots"), help="output directory")
    p.add_argument("--setup", type=int_in(0, 10**6), default=0, help="measurement setup (0 = most recent)")
    p.add_argument("--context", type=int_in(1, 1 << 20), default=None,
                   help="context of the cost curves (default: the smallest measured)")
    p.add_argument("--study", default="", help="only studies whose name contains this")
    p.add_argument("--max-studies", type=int_in(1, 100), default=6, help="plot at most this many (latest) studies")
    p.set_defaults(run=cmd_plot)

    p = commands.add_parser("bench", help="tuner vs exhaustive grid, and replay vs live (JSON)", formatter_class=fmt,
                            description="Replays every configuration of a grid, runs the tuner with <= 10% as "
                                        "many evaluations for each seed, then runs the tuned settings live.")
    add_models(p)
    p.add_argument("--batch-sizes", type=int_list(1, 1024), default=(1,),
                   help="replay traces with batch size in [first, last]; the bucket's max_batch_size is the last")
    p.add_argument("--grid-c", type=float_list(1e-6, 1e6), default=(0.03, 0.3, 3.0),
                   help="values of each of C1, C2, C3 in the grid")
    p.add_argument("--grid-depths", type=int_list(1, 256), default=(2, 4, 6), help="max depths in the grid")
    p.add_argument("--grid-top-ks", type=int_list(1, 256), default=(2, 4, 8), help="top-k values in the grid")
    p.add_argument("--grid-budgets", type=int_list(2, 4096), default=(8, 16, 32), help="token budgets m in the grid")
    p.add_argument("--grid-fifo", type=int_list(1, 1024), default=(4,), help="FIFO lengths in the grid")
    p.add_argument("--trials", type=int_in(0, 10**6), default=0, help="tuner trials (default: 10%% of the grid)")
    p.add_argument("--seeds", type=int_list(0, 2**31 - 1), default=(0, 1, 2), help="tuner seeds (one study each)")
    p.add_argument("--max-traces", type=int_in(1, 10**7), default=60, help="traces replayed per configuration")
    p.add_argument("--study", default="", help="study name prefix (<prefix>-seed<seed>; default: bench-<UTC time>)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON result here")
    add_confirm(p, default_prompts=4, default_tokens=48)
    add_db(p)
    p.set_defaults(run=cmd_bench)

    add_preflight_parser(commands, fmt, int_in, float_in)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AutotuneError as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted; everything committed so far is kept (rerun to resume)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
