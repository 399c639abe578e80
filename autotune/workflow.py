"""The ``tune`` pipeline shared by the CLI and the daemon: measured costs (forward
tables and host overhead) + stored traces → one Optuna study per bucket and weight
format → the fastest format → the live gate against plain decoding (gate.py) →
validated profile.

Weight formats.  Each format's target is its own cost curve (``@<format>`` in its
id), but every format is tuned on the same acceptance traces, those ``collect``
recorded with the fp32 target.  This is an approximation: a reduced-precision
target's greedy token differs from fp32's only where its top logits are a near-tie
(docs/precision.md), so its acceptance is the fp32 target's up to those flips.

Objective across formats (`FormatTuning.score`): the geometric mean over batch
buckets of each bucket's published replayed tokens/s (the tuned tree, or plain
decoding where that is faster).  A geometric mean weighs every bucket's *ratio*
equally, so the large absolute rates of big batches do not drown batch 1, and no
bucket is ignored the way "batch 1 first" would ignore them.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import torch

from sglang_cast.cast import BucketSettings, CostModel, PolicySettings
from sglang_cast.hardware import MachineIdentity
from sglang_cast.profile import LoadedProfile, Profile
from sglang_cast.server.config import SPECULATION_WIN_MARGIN

from .confirm import Confirmation, confirm_live, gate_batch_size, gate_prompts
from .costs import MeasuredCosts, measured_costs
from .errors import AutotuneError
from .gate import GateOutcome, LiveCheck, live_gate, per_bucket
from .models import ModelPair, format_target_id, portable_ref, reference_target_id
from .overhead import LIVE, PLAIN
from .prompts import PromptSet
from .publish import publish
from .sglang_backend import SGLANG, RuntimeStateSizing
from .sglang_gate import GateLoad, SGLangGate
from .space import SearchSpace
from .store import NATIVE, Setup, StoredTrace, Store, nearest_setup_hint, package_version
from .tuner import INCUMBENT_MARGIN, BucketResult, assign_buckets, even_sample, replay_filter, tune_bucket

RANDOM_HEAD_NOTE = ("draft head: random-weight EAGLE-1/2 head (no trained head existed when this ran). The target "
                    "table is valid; the draft table is valid for an EAGLE-1/2 head of this shape only (an EAGLE-3 "
                    "head has a 3h-wide fc and a reduced-vocab LM head: re-run `cast-autotune profile` with it). "
                    "Thresholds were tuned on near-zero acceptance: re-collect and re-tune with the trained head.")


@dataclass(frozen=True)
class TuneConfig:
    label: str
    output: Path
    buckets: tuple[int, ...] = (1, 4, 16)
    trials: int = 100
    space: SearchSpace = field(default_factory=SearchSpace)
    study_prefix: str = ""  # default: "<label>-<UTC timestamp>"
    seed: int = 0
    max_traces: int = 200  # per bucket
    dataset: str | None = None  # only traces of this dataset
    confirm_prompts: int = 4  # per slice; 0 skips the live gate
    confirm_sets: int = 3  # disjoint slices of confirm_prompts prompts; CAST must lose on none (Confirmation.wins)
    confirm_max_new_tokens: int = 32
    live_rounds: int = 3  # interleaved rounds of CAST and of plain decoding per bucket
    live_margin: float = 0.15  # |live steps' ms / their charge - 1| beyond which the overhead is refitted once
    live_min_speedup: float = 1.0 + SPECULATION_WIN_MARGIN  # live CAST / live plain a speculating bucket needs
    context_length: int = 2048
    weight_formats: tuple[str, ...] = ("fp32",)  # each profiled one is tuned; the fastest is published
    # --backend sglang: the runtime states the published profile names, chosen by replaying the tuned policy
    runtime_states: RuntimeStateSizing | None = None
    # --incumbent: the buckets of the profile this tune would replace (each bucket's tree joins its study,
    # and is kept unless the best trial replays more than incumbent_margin above it)
    incumbent: PolicySettings | None = None
    incumbent_margin: float = INCUMBENT_MARGIN

    def incumbent_for(self, size: int) -> BucketSettings | None:
        """The incumbent profile's bucket serving batch size ``size``, if there is one."""
        return None if self.incumbent is None else self.incumbent.for_batch(size)


@dataclass(frozen=True)
class FormatTuning:
    """One weight format's tuned buckets, on the shared traces with its own cost tables."""

    weight_format: str
    costs: MeasuredCosts
    results: list[BucketResult]

    @property
    def score(self) -> float:
        """Geometric mean over buckets of the replayed tokens/s (module docstring)."""
        return math.exp(statistics.fmean(math.log(r.tokens_per_s) for r in self.results))

    def summary(self) -> dict:
        return {"weight_format": self.weight_format, "geomean_replay_tokens_per_s": round(self.score, 3),
                "replay_tokens_per_s": {str(r.settings.max_batch_size): round(r.tokens_per_s, 3)
                                        for r in self.results},
                "studies": [r.study for r in self.results]}


@dataclass(frozen=True)
class TuneOutcome:
    published: LoadedProfile
    results: list[BucketResult]  # the published format's buckets
    confirmations: dict[int, Confirmation]  # the final live check per confirmed bucket (by max_batch_size)
    formats: list[FormatTuning] = field(default_factory=list)  # every tuned format, in --weight-format order
    not_profiled: tuple[str, ...] = ()  # formats asked for that have no measurements
    refit: dict | None = None  # what the live gate's refit changed (None: no refit)

    @property
    def weight_format(self) -> str:
        return fastest_format(self.formats).weight_format


def fastest_format(tunings: list[FormatTuning]) -> FormatTuning:
    """The format with the highest score; the first listed wins a tie."""
    return max(tunings, key=lambda t: t.score)


def study_prefix_for(prefix: str, weight_format: str) -> str:
    """fp32 keeps the plain prefix (studies ``<prefix>-b<bucket>`` resume as before)."""
    return prefix if weight_format == "fp32" else f"{prefix}-{weight_format.replace('/', '-')}"


def _versions() -> dict[str, str]:
    return {"torch": str(torch.__version__), "sglang_cast": package_version(), "optuna": version("optuna"),
            "python": platform.python_version()}


def bucket_sample(bucket_traces: list[StoredTrace], config: TuneConfig) -> list:
    return even_sample([s.trace for s in bucket_traces], config.max_traces)


def tune_format(store: Store, costs: MeasuredCosts, weight_format: str, by_bucket: dict, config: TuneConfig,
                prefix: str, stop: threading.Event | None, progress: bool) -> FormatTuning | None:
    """Tune every bucket for one format on its cost tables; None when stopped."""
    results = []
    for size, bucket_traces in by_bucket.items():
        study = f"{study_prefix_for(prefix, weight_format)}-b{size}"
        results.append(replay_filter(tune_bucket(store, study, bucket_sample(bucket_traces, config), costs.costs,
                                                 size, config.space, config.trials, config.seed, stop, progress,
                                                 config.incumbent_for(size), config.incumbent_margin)))
        if stop is not None and stop.is_set():
            return None
    return FormatTuning(weight_format, costs, results)


def format_setups(store: Store, setup: Setup, formats: tuple[str, ...]) -> tuple[dict[str, Setup], tuple[str, ...]]:
    """Each format's measurement setup, and the formats with no measurements at all."""
    setups = {fmt: replace(setup, target_model=format_target_id(setup.target_model, fmt)) for fmt in formats}
    missing = tuple(fmt for fmt, s in setups.items() if not store.measurements(s))
    if len(missing) == len(formats):
        raise AutotuneError(f"--weight-format: no measurements in {store.path} for {setup.device!r}, "
                            f"{reference_target_id(setup.target_model)} in {', '.join(formats)} (threads "
                            f"{setup.threads}); {nearest_setup_hint(store.setups(), list(setups.values()))}; run "
                            f"`cast-autotune profile --weight-format {','.join(formats)}` first")
    return {fmt: s for fmt, s in setups.items() if fmt not in missing}, missing


def run_live_gate(store: Store, fmt_setup: Setup, best: FormatTuning, by_bucket: dict, config: TuneConfig,
                  prefix: str, check: LiveCheck, live_backend: str, say: Callable[[str], None],
                  progress: bool) -> GateOutcome:
    """The live gate over ``best``'s buckets: a refit stores the live steps under the
    format's setup (source ``live``, at the profile's speed: each confirmation's drift
    divided out) and refits from everything stored; a re-tune is
    a new study ``<prefix>-b<size>-refit`` on the same traces.  ``live_backend``: the
    engine ``check`` runs; a setup of another backend is never refitted from its steps."""
    def refit(confirmations: list[Confirmation]) -> MeasuredCosts:
        load = os.getloadavg()[0]
        for c in confirmations:
            cast_steps, plain_steps = c.steps_at_profile_speed()
            store.add_steps(fmt_setup, LIVE, f"cast-b{c.batch_size}", cast_steps, load)
            store.add_steps(fmt_setup, LIVE, PLAIN, plain_steps, load)
        return measured_costs(store, fmt_setup)

    def retune(size: int, costs: CostModel) -> BucketResult:
        study = f"{study_prefix_for(prefix, best.weight_format)}-b{size}-refit"
        return replay_filter(tune_bucket(store, study, bucket_sample(by_bucket[size], config), costs, size,
                                         config.space, config.trials, config.seed, progress=progress,
                                         incumbent=config.incumbent_for(size),
                                         incumbent_margin=config.incumbent_margin))

    # Only the measured setup of the engine the live runs time may refit (not another backend's,
    # nor tables calibrated from another machine's profile, which have no measurements).
    measured = fmt_setup.backend == live_backend and best.costs.calibrated_from is None
    return live_gate(best.results, best.costs, check, refit if measured else None, retune, config.live_margin, say,
                     min_speedup=config.live_min_speedup)


def usable_traces(store: Store, reference_id: str, draft_id: str,
                  config: TuneConfig) -> tuple[list[StoredTrace], list[StoredTrace]]:
    """The stored traces of this pair, and those whose recorded tree covers the search
    space (a trace can only replay trees within the shape it recorded)."""
    stored = store.traces(reference_id, draft_id, dataset=config.dataset)
    if not stored:
        raise AutotuneError(f"no traces in {store.path} for {reference_id} + {draft_id}; "
                            "run `cast-autotune collect` first")
    space = config.space
    usable = [s for s in stored if space.covered_by(s.trace)]
    if not usable:
        recorded = sorted({(s.trace.top_k, s.trace.draft_depth, s.trace.lookup_depth) for s in stored})
        raise AutotuneError(f"--top-k/--max-depth/--max-lookup-depth: no stored trace covers the space (top_k <= "
                            f"{space.top_k}, depth <= {space.max_depth}, lookup depth <= {space.lookup_depth}); "
                            f"recorded (top_k, depth, lookup depth): {recorded}; collect with a larger shape and "
                            "branch (--lookup-depth) or shrink the space")
    return stored, usable


def format_tables(store: Store, setup: Setup, config: TuneConfig, given: dict[str, MeasuredCosts] | None
                  ) -> tuple[dict[str, Setup], dict[str, MeasuredCosts], tuple[str, ...]]:
    """Each tuned format's setup and cost tables, and the formats asked for that have no
    measurements: the database's, or ``given`` (calibrated from another machine)."""
    if given is not None:
        setups = {fmt: replace(setup, target_model=format_target_id(setup.target_model, fmt)) for fmt in given}
        return setups, given, ()
    setups, not_profiled = format_setups(store, setup, config.weight_formats)
    return setups, {fmt: measured_costs(store, fmt_setup) for fmt, fmt_setup in setups.items()}, not_profiled


def live_confirmation(pair: ModelPair, reference_id: str, weight_format: str,
                      load_format: Callable[[str], ModelPair] | None, by_bucket: dict, config: TuneConfig,
                      prompts: PromptSet, progress: bool) -> LiveCheck:
    """The native live gate's check: each bucket's tree against plain decoding on the
    pair in the published format (loaded by ``load_format`` when that is not ``pair``'s),
    one bucket after the other."""
    live_pair = pair
    if format_target_id(reference_id, weight_format) != pair.target_id:
        if load_format is None:
            raise AutotuneError(f"--weight-format: {weight_format} is fastest but no loader was given for it")
        live_pair = load_format(weight_format)

    def confirm(settings, size: int) -> Confirmation:
        bucket_traces = by_bucket[size]
        batch = gate_batch_size(bucket_traces)
        return confirm_live(live_pair, settings, gate_prompts(prompts, batch, config.confirm_prompts,
                                                              config.confirm_sets), batch,
                            config.confirm_max_new_tokens, config.context_length, bucket_traces, config.live_rounds,
                            progress, slices=config.confirm_sets)
    return per_bucket(confirm)


def gate_load(config: TuneConfig) -> GateLoad:
    return GateLoad(config.confirm_prompts, config.confirm_sets, config.confirm_max_new_tokens, config.live_rounds)


def search_space_summary(config: TuneConfig) -> dict:
    return {"c_range": [config.space.c_min, config.space.c_max], "top_k": [1, config.space.top_k],
            "max_depth": [1, config.space.max_depth], "num_verify_tokens": [2, config.space.max_tokens],
            "fifo_len": [1, config.space.fifo_max], "lookup_depth": [0, config.space.lookup_depth],
            "trials_per_bucket": config.trials}


def live_gate_summary(config: TuneConfig, results: list[BucketResult], gate: GateOutcome | None,
                      engine: str) -> dict:
    return {"rule": "a bucket speculates only if its best tree beats plain decoding in replay, then live by "
                    "min_speedup over all slices of the prompts and no loss on any one (interleaved rounds, medians)",
            "engine": engine,
            "rounds": config.live_rounds, "slices": config.confirm_sets, "margin": config.live_margin,
            "min_speedup": config.live_min_speedup,
            "off_by_replay": [r.settings.max_batch_size for r in results if r.off_by == "replay"],
            "off_by_live": [r.settings.max_batch_size for r in results if r.off_by == "live"],
            "refit": gate.refit if gate else None}


def larger_batches_note(results: list[BucketResult], traced_batch: int, profiled: tuple[int, ...]) -> str | None:
    """A warning when the last bucket speculates at batch sizes it was never tuned at.

    The last bucket serves every larger batch (`PolicySettings.for_batch`), and its tree
    was chosen on traces of batches up to ``traced_batch``; where the cost tables reach
    larger batches (``profiled``), a server may run there with a tree no replay judged
    (through SGLang on the CPU, 2026-11-27: a bucket-4 tree ran 0.83x plain decoding at
    c = 16, docs/gpu.md)."""
    last = results[-1].settings
    if not last.speculate or max(profiled) <= traced_batch:
        return None
    return (f"bucket <= {last.max_batch_size} speculates and serves every larger batch, but its tree was tuned on "
            f"batches of at most {traced_batch} while the cost tables reach batch {max(profiled)}: collect traces at "
            f"the larger batch sizes and add them to --buckets, or serve at most {traced_batch} requests at once")


def tune_notes(pair: ModelPair, reference_id: str, weight_format: str) -> list[str]:
    """What a reader of the profile must know about how it was tuned."""
    notes = [RANDOM_HEAD_NOTE] if pair.random_draft else []
    if weight_format != "fp32":
        notes.append(f"acceptance traces were recorded with the fp32 target ({reference_id}); a {weight_format} "
                     "target's greedy token differs only at near-ties, so its acceptance is taken as fp32's")
    return notes


def tune_and_publish(pair: ModelPair, store: Store, setup: Setup, config: TuneConfig, prompts: PromptSet, *,
                     load_format: Callable[[str], ModelPair] | None = None, stop: threading.Event | None = None,
                     progress: bool = True, live_check: LiveCheck | None = None,
                     say: Callable[[str], None] = print,
                     format_costs: dict[str, MeasuredCosts] | None = None,
                     sglang_gate: SGLangGate | None = None) -> TuneOutcome | None:
    """Tune every bucket of every profiled format, gate the fastest live against plain
    decoding, publish it.

    ``pair`` and ``setup`` are the fp32 reference's (the traces are keyed by it);
    ``format_costs`` gives each format's tables instead of the database's measurements
    (``tune --calibrate-from``: another machine's profile fitted here; the live gate then
    refits nothing, there being no measurements to refit with);
    ``load_format`` loads the pair in another format for the live runs;
    ``sglang_gate``: the live gate runs SGLang's engine instead of the native one
    (``tune --backend sglang``; ``pair`` may then be its ids only);
    ``live_check`` replaces the live runs (tests plant their rates); ``say`` gets
    the gate's one-line notices.  Returns ``None`` (and publishes nothing) when
    ``stop`` is set before the end."""
    reference_id = reference_target_id(pair.target_id)
    stored, usable = usable_traces(store, reference_id, pair.draft_id, config)
    setups, format_costs, not_profiled = format_tables(store, setup, config, format_costs)
    prefix = config.study_prefix or f"{config.label}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    by_bucket = assign_buckets(usable, config.buckets)
    tunings = []
    for fmt in setups:
        tuning = tune_format(store, format_costs[fmt], fmt, by_bucket, config, prefix, stop, progress)
        if tuning is None:
            return None
        tunings.append(tuning)
    for tuning in tunings:
        if tuning.costs.costs.overhead is None:
            say(f"host overhead: not measured for weight format {tuning.weight_format} (no whole steps stored): its "
                "costs are the forwards' alone; `cast-autotune profile` measures it")
    best = fastest_format(tunings)

    model = {"target": portable_ref(format_target_id(reference_id, best.weight_format)),
             "draft": portable_ref(pair.draft_id), "dtype": pair.dtype, "weight_format": best.weight_format}

    # What --backend sglang sizes runtime states on: the iterations tune replayed.
    replayed = ([trace for size in by_bucket for trace in bucket_sample(by_bucket[size], config)]
                if config.runtime_states is not None else [])

    def with_states(profile: Profile) -> Profile:
        """``profile`` with the runtime states SGLang builds for it (``--backend sglang``),
        sized on the iterations tune replayed."""
        if config.runtime_states is None:
            return profile
        return config.runtime_states.size(profile, setup.tp_size, replayed,
                                          f"{len(replayed)} iterations tune replayed (at most "
                                          f"{config.max_traces} per bucket)")

    gate = None
    live_backend = SGLANG if sglang_gate is not None else NATIVE  # the engine the live gate runs
    if config.confirm_prompts > 0:
        if live_check is None and sglang_gate is not None:
            live_check = sglang_gate.check(
                by_bucket, lambda settings: with_states(Profile(config.label, setup.device, "measured", settings,
                                                                model=model)),
                prompts, gate_load(config), progress)
        elif live_check is None:
            live_check = live_confirmation(pair, reference_id, best.weight_format, load_format, by_bucket, config,
                                           prompts, progress)
        gate = run_live_gate(store, setups[best.weight_format], best, by_bucket, config, prefix, live_check,
                             live_backend, say, progress)
        if stop is not None and stop.is_set():
            return None
    results, costs = (gate.results, gate.costs) if gate else (best.results, best.costs)
    settings = PolicySettings(buckets=tuple(r.settings for r in results), costs=costs.costs)
    live = gate.live_summaries() if gate else None
    notes = tune_notes(pair, reference_id, best.weight_format)
    untuned = larger_batches_note(results, max(s.batch_size for s in usable), costs.target.table.batch_sizes)
    if untuned is not None:
        say(untuned)
        notes.append(untuned)

    provenance = {
        "tool": "cast-autotune tune",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "db": portable_ref(str(store.path)),
        "study_prefix": prefix,
        "versions": _versions(),
        # What tells this machine from another with the same name (hardware.MachineIdentity): a
        # server on another machine says so in one line when it loads the profile.
        "machine": {**MachineIdentity.current(pair.device).to_dict(), "torch_threads": torch.get_num_threads()},
        "cost_tables": costs.provenance(),
        "traces": {"dataset": config.dataset or "all", "stored": len(stored), "usable": len(usable),
                   "per_bucket": {str(k): len(v) for k, v in by_bucket.items()}, "max_per_bucket": config.max_traces,
                   "target": portable_ref(reference_id)},
        "search_space": search_space_summary(config),
        "weight_formats": {"objective": "geometric mean over buckets of replayed tokens/s",
                           "published": best.weight_format, "tuned": [t.summary() for t in tunings],
                           "not_profiled": list(not_profiled)},
        "tuning": [r.summary() for r in results],
        "live_confirmation": live if gate else "skipped (--confirm-prompts 0): no bucket was run live",
        "live_gate": live_gate_summary(config, results, gate, live_backend),
        "notes": notes,
    }
    profile = with_states(Profile(label=config.label, device=setup.device, source="measured", settings=settings,
                                  model=model, provenance=provenance))
    published = publish(profile, config.output, store, results[0].study, results[0].trial, live)
    for result in results[1:]:
        store.record_publication(published.path.resolve(), config.label, published.version, "measured",
                                 result.study, result.trial, live)
    return TuneOutcome(published, results, gate.confirmations if gate else {}, tunings, not_profiled,
                       gate.refit if gate else None)
