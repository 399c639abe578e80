"""The command line of ``tools/bench.py`` (its docstring is the ``--help`` text):
flags, inputs, and the two modes (method table, figures) writing JSON, Markdown, PNG."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from autotune.errors import AutotuneError
from autotune.models import ModelPair, load_model_pair
from autotune.prompts import load_prompts
from autotune.store import default_db_path
from sglang_cast.cast import EAGLE2_SHAPE, PolicySettings
from sglang_cast.engine.format_choice import (AUTO, DENSE, choose_weight_format, parse_requested, running_format,
                                              verify_sizes)
from sglang_cast.engine.table_calibration import calibrate
from sglang_cast.hardware import MachineIdentity
from sglang_cast.models.compiled import COMPILE_MODES, compile_models, compile_wanted
from sglang_cast.models.weights import WeightFormatError
from sglang_cast.profile import LoadedProfile, ProfileError, load_profile
from sglang_cast.server.startup_calibration import wanted

from .anchor import anchor_model
from .figures import FIGURES, budget_sweep
from .inputs import BenchError, DeviceSpec, load_settings, parse_device, parse_list
from .lossless import Judge, check_failed, kernel_path_judge, needs_judge
from .methods import DEFAULT_METHODS, against, best_static_shapes, parse_methods
from .plots import plot_acceptance, plot_speedups, plot_verify_budget
from .records import command_line, machine_info, model_record, write_json
from .rounds import DEFAULT_ROUNDS, MIN_ROUNDS
from .table import bench, markdown

DEFAULT_BUDGETS = "2,4,8,16,32,60"
MAX_ROUNDS = 50


def parse_args(argv: list[str] | None, description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=None,
                        help="comma-separated methods (see above); vanilla is needed for speedups and the "
                             f"lossless check (default: {DEFAULT_METHODS}); not used with --figure")
    parser.add_argument("--dataset", required=True, help="JSONL with 'turns' (first turn used), or one prompt per line")
    parser.add_argument("--batch-size", default="1", help="comma-separated batch sizes, 1..256 (default 1)")
    parser.add_argument("--temperature", default="0",
                        help="comma-separated temperatures, 0..2; 0 = greedy (default 0); one value with --figure")
    parser.add_argument("--num-prompts", type=int, default=16, help="prompts from the start of the dataset (16)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per prompt, 1..4096 (128)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"timed rounds per (method, batch size), interleaved across methods after one "
                             f"untimed warm-up each; the median is reported, with every round; "
                             f"{MIN_ROUNDS}..{MAX_ROUNDS} (default {DEFAULT_ROUNDS})")
    parser.add_argument("--device", default="cpu", help="where the native engine runs: cpu, cuda or cuda:N (cpu)")
    parser.add_argument("--dtype", default="float32",
                        help="the target's and draft's dtype (residual stream; dense weights on CUDA): "
                             "float32, bfloat16 or float16 (default float32)")
    parser.add_argument("--profile", help="CAST profile YAML (default: profiles/<this hardware's label>.yaml)")
    parser.add_argument("--against-profile", action="append", default=[], metavar="YAML",
                        help="another CAST profile of the same weight format: every drafting method the profile "
                             "shapes (cast, goodput, ...) runs under it too, in the same interleaved rounds, "
                             "labelled '<method>@<YAML>'; repeatable. How a re-tuned profile is judged against "
                             "the one it replaces; not used with --figure")
    parser.add_argument("--db", type=Path, default=None,
                        help="autotune database with the traces eagle2-best is chosen on (default: cast-autotune's)")
    parser.add_argument("--best-traces", type=int, default=20, help="traces replayed per grid point (20)")
    parser.add_argument("--model-path", default=None, help="target model (default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--draft-path", default=None, help="draft head (default: the shipped head)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--weight-format", default=AUTO,
                        help="how the target's linears / LM head are stored: fp32, bf16, int8, int4, int4amx, int8amx, int4vnni, int8vnni or "
                             "'<linears>/<lm_head>' such as int4/int8, either optionally with ':dense<N>' (forwards of N or "
                             "more rows run the dense weights) and with '+<draft>' (the draft head's linears, "
                             "int4/int8+int8, with its own ':dense<N>[:bf16]') (docs/precision.md), or auto: the "
                             "profile's recorded format, else the cheapest in a few timed forwards, as the server decides; "
                             "on CUDA auto or fp32 (dense weights in --dtype) (default: auto)")
    parser.add_argument("--compile", default="off", choices=COMPILE_MODES,
                        help="compile the target's and draft's layers (models/compiled.py): on, off, or auto = "
                             "packed --weight-format only (default: off); compiled before timing starts")
    parser.add_argument("--disable-cuda-graph", action="store_true",
                        help="on CUDA, run every forward eagerly instead of replaying the engine's CUDA graphs "
                             "(engine/cuda_graphs.py); each record's cuda_graphs field says what was captured")
    parser.add_argument("--cast-calibrate", choices=("auto", "on", "off"), default="auto",
                        help="fit the profile's forward tables to this machine before timing, as the server does "
                             "(server/startup_calibration.py): auto when the profile was measured on another "
                             "machine, on, off; the fit is in the JSON header (default: auto)")
    parser.add_argument("--json", type=Path, required=True, help="where to write the records")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown")
    parser.add_argument("--plot", type=Path, help="also write a PNG of speedup vs batch size per method; with "
                                                  "--figure, the figure's PNG (default: --json with .png)")
    parser.add_argument("--figure", choices=FIGURES, default=None,
                        help="instead of the method table, the paper's Fig. 3 (acceptance: τ vs the verified set's "
                             "cumulative value) or Fig. 4 (verify-budget: tokens/s vs m), from EAGLE-2's default "
                             "tree at every --budgets m")
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS,
                        help=f"with --figure: comma-separated verify budgets m, 2..{EAGLE2_SHAPE.pool_size + 1} "
                             "(default %(default)s)")
    # Set by load_inputs: how 'auto' was resolved, and seconds the compilation took.
    parser.set_defaults(format_choice=None, compile_s=None, spec=None, calibration=None)
    return parser.parse_args(argv)


def require_positive(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Refuse any of the integer flags ``names`` below 1: argparse's exit 2 with the
    flag named (the small tools' rule; the bench's own sizes have ranges, below)."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")


def check_run_sizes(args: argparse.Namespace, batch_sizes: Sequence[int]) -> None:
    """Prompt count, new tokens, rounds, device, dtype, weight format and threads, shared
    by the table and the figures; sets ``args.spec`` and the canonical ``args.weight_format``."""
    if not 1 <= args.num_prompts <= 10_000:
        raise BenchError(f"--num-prompts: must be in [1, 10000], got {args.num_prompts}")
    if args.num_prompts < max(batch_sizes):
        raise BenchError(f"--num-prompts: {args.num_prompts} prompts cannot fill batch size {max(batch_sizes)}; "
                         "give at least as many prompts as the largest --batch-size")
    if not 1 <= args.max_new_tokens <= 4096:
        raise BenchError(f"--max-new-tokens: must be in [1, 4096], got {args.max_new_tokens}")
    if not MIN_ROUNDS <= args.rounds <= MAX_ROUNDS:
        raise BenchError(f"--rounds: must be in [{MIN_ROUNDS}, {MAX_ROUNDS}], got {args.rounds}")
    try:
        args.weight_format = parse_requested(args.weight_format)
    except WeightFormatError as err:
        raise BenchError(f"--weight-format: {err.reason}") from None
    args.spec = parse_device(args.device, args.dtype)
    if args.spec.is_cuda and args.weight_format not in (AUTO, DENSE):
        raise BenchError(f"--weight-format: {args.weight_format} runs on the CPU only; on {args.device} use auto "
                         f"or {DENSE} (dense weights in --dtype)")
    if args.threads is not None:
        if not 1 <= args.threads <= (os.cpu_count() or 1):
            raise BenchError(f"--threads: must be in [1, {os.cpu_count()}], got {args.threads}")
        torch.set_num_threads(args.threads)


def timed_sizes(args: argparse.Namespace, settings: PolicySettings) -> tuple[int, ...]:
    """The Ms ``--weight-format auto`` times: 1, plus the largest tree this run verifies."""
    if args.figure:
        return (1, max(parse_list(args.budgets, int, "--budgets", 2, EAGLE2_SHAPE.pool_size + 1)))
    return verify_sizes(settings, any(m.drafts for m in parse_methods(args.methods)))


def load_inputs(args: argparse.Namespace) -> tuple[list[str], PolicySettings, str, ModelPair]:
    """The dataset's first ``--num-prompts`` texts, the profile's settings and the model pair
    on ``args.spec`` in the resolved weight format (``args.format_choice`` says how it was chosen)."""
    spec: DeviceSpec = args.spec
    prompt_set = load_prompts(args.dataset)
    if len(prompt_set.texts) < args.num_prompts:
        raise BenchError(f"--num-prompts: {args.dataset} has only {len(prompt_set.texts)} prompts")
    loaded = load_settings(args.profile, spec.device)
    args.format_choice = choose_weight_format(args.weight_format, device=spec.device, profile=loaded.profile,
                                              sizes=timed_sizes(args, loaded.profile.settings),
                                              model_path=args.model_path, dtype=spec.torch_dtype)
    print(args.format_choice.describe(spec.torch_dtype), file=sys.stderr)
    pair = load_model_pair(args.model_path, args.draft_path, spec.device, spec.dtype,
                           weight_format=args.format_choice.weight_format)
    pair.cuda_graph = not args.disable_cuda_graph
    if compile_wanted(args.compile, pair.target):
        started = time.perf_counter()
        compile_models(pair.target, pair.draft, max(parse_list(args.batch_size, int, "--batch-size", 1, 256)))
        args.compile_s = round(time.perf_counter() - started, 1)
    settings, args.calibration = served_settings(args, loaded, pair)
    return prompt_set.texts[: args.num_prompts], settings, f"{loaded.path} (version {loaded.version})", pair


def served_settings(args: argparse.Namespace, loaded: LoadedProfile,
                    pair: ModelPair) -> tuple[PolicySettings, dict | None]:
    """``loaded``'s settings as this run serves them: its forward tables fitted to this
    machine where ``--cast-calibrate`` wants it (with the fit's report), else as published."""
    settings = loaded.profile.settings
    if not wanted(args.cast_calibrate, loaded.profile, MachineIdentity.current("cuda" if args.spec.is_cuda else "cpu")):
        return settings, None
    served = calibrate(pair.target, pair.draft, settings.costs, max(parse_list(args.batch_size, int, "--batch-size",
                                                                               1, 256)), pair.graph_backend)
    return replace(settings, costs=served.costs), served.report(settings.costs)


def load_against(args: argparse.Namespace, pair: ModelPair) -> tuple[dict[str, PolicySettings], dict[str, dict]]:
    """``--against-profile``: each profile's served settings by the name its methods are
    labelled with, and what the JSON records of each (version, calibration); every one must
    have been tuned for the weight format this run loaded."""
    against: dict[str, PolicySettings] = {}
    recorded_as: dict[str, dict] = {}
    for path in args.against_profile:
        if path in against:
            raise BenchError(f"--against-profile: {path} given twice")
        try:
            loaded = load_profile(path)
        except ProfileError as err:
            raise BenchError(f"--against-profile: {err}") from None
        recorded = loaded.profile.weight_format
        if recorded is not None and parse_requested(recorded) != args.format_choice.weight_format:
            raise BenchError(f"--against-profile: {path} was tuned for weight format {recorded}, this run's models "
                             f"run {args.format_choice.weight_format}; compare profiles of one format (run the "
                             "bench once per format)")
        against[path], calibration = served_settings(args, loaded, pair)
        recorded_as[path] = {"version": loaded.version, "calibration": calibration}
    return against, recorded_as


def context_for(pair: ModelPair, prompts: list[str], max_new_tokens: int) -> int:
    return max(len(pair.tokenizer.encode(p)) for p in prompts) + max_new_tokens + 8


def judge_for(pair: ModelPair, spec: DeviceSpec) -> Judge | None:
    """The near-tie judge where greedy runs may flip near-ties (`lossless.needs_judge`), else None."""
    label = running_format(str(pair.target.weight_format), pair.torch_dtype)
    return kernel_path_judge(pair) if needs_judge(label, spec.is_cuda) else None


def header(args: argparse.Namespace, argv: list[str] | None, pair: ModelPair) -> dict:
    """The fields every JSON starts with."""
    return {"command": command_line(argv), "machine": machine_info(args.spec),
            "model": model_record(pair, args.weight_format, args.format_choice, args.compile_s),
            "dataset": args.dataset, "rounds": args.rounds, "max_new_tokens": args.max_new_tokens,
            "calibration": args.calibration}


def main(argv: list[str] | None, description: str) -> int:
    args = parse_args(argv, description)
    return figure_main(args, argv) if args.figure else table_main(args, argv)


def figure_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--figure``: the budget sweep, its JSON and the chosen figure's PNG."""
    try:
        if args.methods is not None:
            raise BenchError("--methods: not used with --figure (it runs EAGLE-2's tree at each --budgets m)")
        if args.against_profile:
            raise BenchError("--against-profile: not used with --figure (it runs EAGLE-2's tree, no profile's)")
        batch_sizes = parse_list(args.batch_size, int, "--batch-size", 1, 256)
        budgets = parse_list(args.budgets, int, "--budgets", 2, EAGLE2_SHAPE.pool_size + 1)
        temperatures = parse_list(args.temperature, float, "--temperature", 0, 2)
        if len(temperatures) != 1:
            raise BenchError(f"--temperature: --figure takes one temperature, got {args.temperature!r}")
        check_run_sizes(args, batch_sizes)
        texts, settings, profile_name, pair = load_inputs(args)
    except (BenchError, AutotuneError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if pair.random_draft:
        print(f"WARNING: no trained draft head; the figures use {pair.draft_id}", file=sys.stderr)
    prompts = [pair.format_prompt(text) for text in texts]
    runs, vanilla = budget_sweep(pair, settings, prompts, batch_sizes, budgets, temperatures[0], args.max_new_tokens,
                                 context_for(pair, prompts, args.max_new_tokens), judge_for(pair, args.spec),
                                 args.rounds)
    write_json(args.json, header(args, argv, pair) | {
        "prompts": len(prompts), "temperature": temperatures[0], "figure": args.figure,
        "tree": {"top_k": EAGLE2_SHAPE.top_k, "max_depth": EAGLE2_SHAPE.max_depth},
        "vanilla_tokens_per_s": {str(b): rate for b, rate in vanilla.items()},
        "runs": [asdict(r) for r in runs]})
    png = args.plot or args.json.with_suffix(".png")
    dataset = Path(args.dataset).stem
    if args.figure == "acceptance":
        plot_acceptance(runs, png, f"{dataset}: acceptance length vs cumulative value (EAGLE-2 tree)")
    else:
        plot_verify_budget(runs, vanilla, png, f"{dataset}: tokens/s vs verify budget m (EAGLE-2 tree)")
    for run in runs:
        print(f"batch {run.batch_size} m={run.num_verify_tokens}: {run.tokens_per_s:.1f} tok/s (median of "
              f"{args.rounds}), τ {run.tau:.2f}, verified {run.mean_verified_tokens:.1f}, lossless {run.lossless}")
    return 1 if any(check_failed(r) for r in runs) else 0


def table_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The method table: every method at every batch size and temperature."""
    try:
        methods = parse_methods(args.methods)
        batch_sizes = parse_list(args.batch_size, int, "--batch-size", 1, 256)
        temperatures = parse_list(args.temperature, float, "--temperature", 0, 2)
        check_run_sizes(args, batch_sizes)
        texts, settings, profile_name, pair = load_inputs(args)
        others, against_profiles = load_against(args, pair)
        for name, other in others.items():
            added = against(methods, name, other)
            if not added:
                raise BenchError("--against-profile: no method here is shaped by a profile (cast, goodput, "
                                 "cast+lookup, ...); add one to --methods")
            methods += added
        if pair.random_draft and any(m.drafts for m in methods):
            print(f"WARNING: no trained draft head; speculative methods use {pair.draft_id}", file=sys.stderr)
        gguf, methods = anchor_model(methods, args.model_path, args.spec.is_cuda)
        if not methods:
            raise BenchError("--methods: nothing left to run")
        best = {}
        if any(m.shape == "best" for m in methods):
            best = best_static_shapes(pair, settings, batch_sizes, args.db or default_db_path(), args.best_traces)
    except (BenchError, AutotuneError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    prompts = [pair.format_prompt(text) for text in texts]
    records = bench(pair, methods, settings, best, prompts, batch_sizes, temperatures, args.max_new_tokens,
                    context_for(pair, prompts, args.max_new_tokens), gguf, judge_for(pair, args.spec), args.rounds)
    write_json(args.json, header(args, argv, pair) | {
        "profile": profile_name, "against_profiles": against_profiles, "prompts": len(prompts),
        "eagle2_best_shapes": {str(b): asdict(s) for b, s in best.items()},
        "records": [asdict(r) for r in records]})
    table = markdown(records, Path(args.dataset).stem)
    print(table)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    if args.plot:
        plot_speedups(records, args.plot, f"{Path(args.dataset).stem}: speedup vs batch size")
    return 1 if any(check_failed(r) for r in records) else 0
