"""Everything ``cast-autotune`` prints, as text the commands print: ``show``'s view
of the database (cost curves, the host-overhead table, traces, tuning history,
publications and their live gate) and each command's summary of what it did.

Cost curves are printed as timed (never interpolated) medians with the ratio
``f(B, c, n) / f(B, c, 1)``, the quantity CAST's decisions actually read.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import optuna
from sqlalchemy import func, select

from sglang_cast.cast import OverheadTable
from sglang_cast.cast.overhead import TERMS
from sglang_cast.engine.build import default_draft_path
from sglang_cast.engine.table_calibration import StartupCalibration
from sglang_cast.hardware import MachineIdentity, hardware_label
from sglang_cast.models.digest import weights_digest
from sglang_cast.profile import LoadedProfile, Profile, ProfileError, find_profile, load_profile
from sglang_cast.sglang_plugin.memory_plan import MemoryPlan
from sglang_cast.sglang_plugin.plugin_config import StaticShape

from .collect import CollectReport
from .costs import measured_costs
from .errors import AutotuneError
from .grid import ProfileGrid
from .overhead import StepDesign, StepProfileReport
from .profiler import ProfileReport
from .prompts import PromptSet
from .store import Measurement, Setup, Store, TraceRecord
from .tuner import storage
from .workflow import TuneOutcome

OVERHEAD_SKIPPED = "host overhead: not measured (--overhead-steps 0)"


def format_table(header: list[str], rows: list[list[object]]) -> str:
    cells = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def cost_curves(rows: list[Measurement], role: str) -> str:
    """One table per context: rows = batch sizes, columns = timed n (ms and ratio)."""
    by_context: dict[int, dict[int, dict[int, Measurement]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if row.role == role:
            by_context[row.context_len][row.batch_size][row.n] = row
    parts = []
    for context in sorted(by_context):
        batches = by_context[context]
        ns = sorted({n for per_n in batches.values() for n in per_n})
        table = []
        for batch in sorted(batches):
            per_n = batches[batch]
            base = per_n[1].median_ms if 1 in per_n else None
            table.append([batch, f"{base:.3g} ms" if base else "-"]
                         + [f"{per_n[n].median_ms / base:.2f}" if base and n in per_n else "-" for n in ns])
        parts.append(f"{role} f(B, c={context}, n) / f(B, c, 1)\n"
                     + format_table(["B", "f(n=1)"] + [f"n={n}" for n in ns], table))
    return "\n\n".join(parts) if parts else f"no {role} measurements"


def overhead_table(table: OverheadTable | None) -> str:
    """The fitted host terms (ms) per batch size and context bucket."""
    if table is None:
        return "host overhead: not measured (no whole steps stored; costs are the forwards' alone)"
    rows = [[size, (m + 1) * table.bucket] + [float(x) for x in table.ms[b, m]]
            for b, size in enumerate(table.batch_sizes) for m in range(table.num_buckets)]
    return "host overhead (ms beyond the forwards, fitted from whole steps)\n" + format_table(
        ["B", "ctx <="] + list(TERMS), rows)


def live_table(live: list[dict]) -> str:
    """The live gate per bucket: predicted vs live tokens/s of CAST and plain decoding, and
    the live steps' ms over what the cost model charged for them (``-``: a publication
    from before that was recorded)."""
    rows = [[c["batch_size"], c["predicted_cast_tokens_per_s"], c["live_cast_tokens_per_s"],
             c["cast_live_over_predicted"], c["predicted_plain_tokens_per_s"], c["live_plain_tokens_per_s"],
             c["plain_live_over_predicted"], c.get("cast_measured_over_charged", "-"),
             c.get("plain_measured_over_charged", "-"), c["live_speedup"],
             min(c["slice_speedups"]) if c.get("slice_speedups") else "-", "yes" if c["speculate"] else "no"]
            for c in live]
    return format_table(["B", "CAST pred", "CAST live", "live/pred", "plain pred", "plain live", "live/pred",
                         "CAST steps/charged", "plain steps/charged", "live CAST/plain", "worst slice",
                         "speculate"], rows)


def slices_text(speedups: tuple[float, ...]) -> str:
    """Each slice's live CAST/plain, the gate's worst first named."""
    each = ", ".join(f"{v:.2f}x" for v in speedups)
    return f"worst of {len(speedups)} prompt slices {min(speedups):.2f}x ({each})" if speedups else "one prompt slice"


def setups_table(store: Store) -> str:
    rows = []
    with store.session() as session:
        for i, setup in enumerate(store.setups()):
            count = session.scalar(select(func.count(Measurement.id)).where(*store.setup_conditions(setup)))
            rows.append([i, setup.device, setup.target_model, setup.draft_model, setup.dtype, setup.threads,
                         setup.torch_version, setup.package_version, count])
    if not rows:
        return "no measurements"
    return format_table(["#", "device", "target", "draft", "dtype", "threads", "torch", "sglang_cast", "points"],
                        rows)


def traces_table(store: Store) -> str:
    with store.session() as session:
        rows = session.execute(
            select(TraceRecord.target_model, TraceRecord.draft_model, TraceRecord.dataset, TraceRecord.batch_size,
                   TraceRecord.top_k, TraceRecord.max_depth, func.count(TraceRecord.id))
            .group_by(TraceRecord.target_model, TraceRecord.draft_model, TraceRecord.dataset,
                      TraceRecord.batch_size, TraceRecord.top_k, TraceRecord.max_depth)).all()
    if not rows:
        return "no traces"
    return format_table(["target", "draft", "dataset", "B", "top_k", "depth", "iterations"], [list(r) for r in rows])


@dataclass(frozen=True)
class StudyHistory:
    name: str
    values: list[tuple[int, float]]  # (trial number, objective) of completed trials
    best_params: dict

    @property
    def best_so_far(self) -> list[float]:
        out, best = [], float("-inf")
        for _, value in self.values:
            best = max(best, value)
            out.append(best)
        return out


def study_histories(store: Store, name_filter: str = "") -> list[StudyHistory]:
    backend = storage(store)
    histories = []
    for summary in optuna.get_all_study_summaries(backend):
        if name_filter not in summary.study_name:
            continue
        study = optuna.load_study(study_name=summary.study_name, storage=backend)
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if done:
            histories.append(StudyHistory(summary.study_name, [(t.number, t.value) for t in done],
                                          study.best_trial.params))
    return histories


def history_table(histories: list[StudyHistory], per_trial: bool) -> str:
    if not histories:
        return "no tuning studies"
    rows = [[h.name, len(h.values), max(v for _, v in h.values),
             ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in h.best_params.items())]
            for h in histories]
    text = format_table(["study", "trials", "best tokens/s", "best params"], rows)
    if per_trial:
        for h in histories:
            text += f"\n\n{h.name}\n" + format_table(
                ["trial", "tokens/s", "best so far"],
                [[n, v, b] for (n, v), b in zip(h.values, h.best_so_far)])
    return text


def publications_table(store: Store) -> str:
    rows = [[p.id, p.created.strftime("%Y-%m-%d %H:%M"), p.label, p.source, p.version, p.study or "-",
             "-" if p.trial is None else p.trial, p.path] for p in store.publications()]
    if not rows:
        return "no published profiles"
    return format_table(["#", "created", "label", "source", "version", "study", "trial", "path"], rows)


def setup_overhead(store: Store, setup: Setup) -> str:
    """The setup's overhead table as ``tune`` would fit it now, with its step counts."""
    try:
        costs = measured_costs(store, setup)
    except AutotuneError as err:  # incomplete forward tables: no grid to fit on yet
        return f"host overhead: not fitted ({err})"
    counts = ", ".join(f"{n} {source}" for source, n in sorted(costs.steps.items())) or "none"
    return f"whole steps stored: {counts}\n" + overhead_table(costs.costs.overhead)


def latest_live(store: Store) -> str:
    published = [p for p in store.publications() if p.live_confirmation]
    if not published:
        return "no live gate recorded"
    latest = published[-1]
    return f"{latest.path} (version {latest.version}, {latest.created:%Y-%m-%d %H:%M})\n" + live_table(
        json.loads(latest.live_confirmation))


def show(store: Store, setup_index: int = 0, study_filter: str = "", per_trial: bool = False) -> str:
    setups = store.setups()
    sections = [f"database: {store.path}", "== measurement setups ==\n" + setups_table(store)]
    if setups:
        index = min(setup_index, len(setups) - 1)
        setup: Setup = setups[index]
        rows = store.measurements(setup)
        sections.append(f"== cost curves of setup #{index} (timed points only) ==\n"
                        + cost_curves(rows, "target") + "\n\n" + cost_curves(rows, "draft"))
        sections.append(f"== host overhead of setup #{index} ==\n" + setup_overhead(store, setup))
    sections.append("== traces ==\n" + traces_table(store))
    sections.append("== tuning history ==\n" + history_table(study_histories(store, study_filter), per_trial))
    sections.append("== published profiles ==\n" + publications_table(store))
    sections.append("== live gate of the latest publication (tokens/s) ==\n" + latest_live(store))
    sections.append("== the profile this machine serves ==\n" + served_profile_line())
    return "\n\n".join(sections)


def served_profile_line(device: str = "cpu") -> str:
    """One line: which shipped profile a server here picks, and whether it was measured
    on this machine (else how it differs, and that the server calibrates it); a second
    when it was tuned with another head than the shipped one."""
    path = find_profile(hardware_label(device))
    if path is None:
        return f"none for {hardware_label(device)!r}: run `cast-autotune profile` and `tune` here"
    try:
        profile = load_profile(path).profile
    except ProfileError as err:
        return f"{path}: unusable: {err}"
    machine = profile.machine_difference(MachineIdentity.current(device))
    line = (f"{path}: measured on this machine (or records no machine)" if machine is None else
            f"{path}: {machine}; the server calibrates its tables at start-up (--cast-calibrate auto)")
    head = default_draft_path(None)  # the shipped head, which the server drafts with by default
    other_head = None if head is None else profile.draft_difference(weights_digest(head))
    return line if other_head is None else f"{line}\n{other_head}"


# ------------------------------------------------------------------ the commands' summaries
def profiled(setup: Setup, label: str, what: str, report: ProfileReport, store: Store, grid: ProfileGrid) -> str:
    """``profile``: how many points were measured, and which n are interpolated."""
    lines = [f"profiled {setup.device} ({label}), {what}: {report.measured} points measured, "
             f"{report.skipped} already in {store.path}"]
    for role in ("target", "draft"):
        skipped = grid.interpolated(role)
        if skipped:
            lines.append(f"{role}: timed n = {list(grid.n_values(role))}; {len(skipped)} other n in "
                         f"1..{grid.max_n_of(role)} are interpolated when cost tables are built")
    return "\n".join(lines)


def rows_shared(role: str, weight_format: str, copied: int) -> str:
    """``profile``: a format's rows of ``role`` taken from another format of the run."""
    same = "draft head format" if role == "draft" else "target part"
    return (f"{role}: the rows timed with weight format {weight_format} (the same {same}; "
            f"{copied} copied, the rest already here), not timed again")


def measured_curves(store: Store, setup: Setup) -> str:
    """``profile``: the setup's cost curves, and the batch sizes left out of its tables."""
    costs = measured_costs(store, setup)
    rows = store.measurements(setup)
    lines = [cost_curves(rows, "target") + "\n\n" + cost_curves(rows, "draft")]
    for role, info in (("target", costs.target), ("draft", costs.draft)):
        if info.left_out:
            lines.append(f"{role}: batch sizes {list(info.left_out)} have incomplete rows and are left out; "
                         "rerun to finish")
    return "\n".join(lines)


def step_counts(dropped: dict[str, int]) -> str:
    """Stored steps per source, as ``Store.drop_steps_older_than_forwards`` returns them."""
    return ", ".join(f"{count} {source}" for source, count in sorted(dropped.items()))


def stale_steps_dropped(dropped: dict[str, int]) -> str:
    """``profile``: the stored steps dropped because the forward tables changed under them."""
    if not dropped:
        return "host overhead: no stored steps predate the forward tables"
    return (f"host overhead: dropped {step_counts(dropped)} steps stored before the forward tables last changed (their "
            "residuals were charged against the old tables); the design's runs are timed again, and the "
            "next `tune`'s live gate adds its steps anew")


def steps_timed(report: StepProfileReport, design: StepDesign) -> str:
    """``profile``: the whole steps the host-overhead step design timed."""
    lines = [f"host overhead: {report.runs} runs of whole steps timed ({report.steps} steps: plain decoding and "
             f"{len(design.shapes)} EAGLE-2 shapes per batch size), {report.skipped} runs already stored"]
    if report.stalls():
        lines.append(f"host overhead: {report.stalls()}")
    return "\n".join(lines)


def fitted_overhead(store: Store, setup: Setup) -> str:
    return overhead_table(measured_costs(store, setup).costs.overhead)


def profiled_formats(formats: Iterable[str]) -> str:
    formats = list(formats)
    return (f"profiled weight formats {', '.join(formats)}: `cast-autotune tune --weight-format "
            f"{','.join(formats)}` tunes each and publishes the fastest")


def collected(report: CollectReport, prompts: PromptSet, batch_sizes: tuple[int, ...], top_k: int, max_depth: int,
              lookup_depth: int, store: Store) -> str:
    return (f"recorded {report.iterations} iterations ({report.tokens} tokens) of {len(prompts.texts)} prompts from "
            f"{prompts.name} at batch sizes {list(batch_sizes)} with top_k {top_k}, depth {max_depth}, lookup "
            f"branch {lookup_depth} "
            f"into {store.path} (runs {', '.join(r[:8] for r in report.run_ids)})")


def calibrated(path: Path, weight_format: str, served: StartupCalibration) -> str:
    """``tune --calibrate-from``: how the profile's tables were fitted to this machine."""
    return (f"calibrated {path} ({weight_format}) to this machine in {served.timings.seconds:.1f} s: "
            f"target x{served.fit.target.scale:.3f}, draft x{served.fit.draft.scale:.3f} (held-out anchors off by "
            f"{_percent(served.fit.target.check_error)} / {_percent(served.fit.draft.check_error)})")


def _percent(error: float | None) -> str:
    return "-" if error is None else f"{100 * error:.0f} %"


def tuned(outcome: TuneOutcome, format_name: Callable[[str], str], states: str | None = None) -> str:
    """``tune``: each weight format's replayed rate, the fastest one's buckets as published,
    their live gate, the runtime states (``--backend sglang``) and the published file."""
    lines = []
    for tuning in outcome.formats:
        rates = ", ".join(f"bucket <= {b}: {r}" for b, r in tuning.summary()["replay_tokens_per_s"].items())
        lines.append(f"weight format {format_name(tuning.weight_format)}: geometric mean {tuning.score:.2f} "
                     f"tokens/s replayed ({rates})")
    if outcome.not_profiled:
        lines.append(f"not profiled, so not tuned: {', '.join(outcome.not_profiled)} (run `cast-autotune profile "
                     f"--weight-format {','.join(outcome.not_profiled)}`)")
    lines.append(f"weight format {format_name(outcome.weight_format)} replays fastest; its buckets, as published:")
    for result in outcome.results:
        s = result.summary()
        b = result.settings
        lines.append(
            f"bucket <= {b.max_batch_size}: {s['replay_tokens_per_s']} tokens/s replayed on {s['traces']} traces "
            f"(vanilla {s['baselines_tokens_per_s']['vanilla']}, eagle2 {s['baselines_tokens_per_s']['eagle2']}"
            + (f", the incumbent's tree {s['baselines_tokens_per_s']['incumbent']}"
               if "incumbent" in s["baselines_tokens_per_s"] else "") + "); "
            + (f"the incumbent's tree kept (trial {result.trial} of {result.study}; the best trial replayed "
               f"{s['baselines_tokens_per_s']['best_trial']}, within the margin): " if result.incumbent_kept
               else f"best trial {result.trial} of {result.study}: ")
            + f"top_k {b.shape.top_k}, depth {b.shape.max_depth}, "
            f"m {b.shape.num_verify_tokens}, C1 {b.thresholds.c1:.3g}, C2 {b.thresholds.c2:.3g}, "
            f"C3 {b.thresholds.c3:.3g}, fifo {b.fifo_len}, branch {b.lookup_depth}; "
            f"speculate: {str(b.speculate).lower()}"
            + (f" (off by {result.off_by})" if result.off_by else ""))
        c = outcome.confirmations.get(b.max_batch_size)
        if c is not None:
            lines.append(
                f"  live gate B={c.batch_size}: CAST {c.live_cast_tokens_per_s:.2f} tokens/s live vs "
                f"{c.predicted_cast_tokens_per_s:.2f} predicted ({c.live_over_predicted:.0%}; "
                f"{c.live_over_predicted_at_profile_speed:.0%} at the profile's speed); plain "
                f"{c.live_plain_tokens_per_s:.2f} live vs {c.predicted_plain_tokens_per_s:.2f} predicted "
                f"({c.plain_live_over_predicted:.0%}; {c.plain_live_over_predicted_at_profile_speed:.0%}); "
                f"live steps took {c.cast_measured_over_charged:.0%} (CAST) and "
                f"{c.plain_measured_over_charged:.0%} (plain) of what the cost model charged for them; "
                f"live CAST/plain {c.live_speedup:.2f}x (predicted "
                f"{c.predicted_speedup:.2f}x; medians of {c.rounds} interleaved rounds; "
                f"{slices_text(c.slice_speedups)}; the machine ran {c.speed_factor:.2f}x the profiled forward "
                "time)")
    if states is not None:
        lines.append(states)
    lines.append(f"published {outcome.published.path} (version {outcome.published.version})")
    return "\n".join(lines)


def analytic_written(published: LoadedProfile, profile: Profile, tp_size: int) -> str:
    costs = profile.settings.costs
    per_gpu = f", per GPU of --tp-size {tp_size}" if tp_size > 1 else ""
    return (f"wrote {published.path} (version {published.version}): {profile.device}{per_gpu}, f_T(1, 512, 1) = "
            f"{costs.target(1, 512, 1):.4f} ms, f_T(1, 512, 64) = {costs.target(1, 512, 64):.4f} ms (roofline)")


def written(paths: Iterable[Path]) -> str:
    return "\n".join(f"wrote {p}" for p in paths)


def preflight(profile: Path, shape: StaticShape, draft_config: Path | None, plan: MemoryPlan) -> str:
    """``preflight``: the launch's tree shape, then the memory plan."""
    return (f"profile {profile}: --speculative-num-steps {shape.num_steps} --speculative-eagle-topk {shape.topk} "
            f"--speculative-num-draft-tokens {shape.num_draft_tokens}; draft head: "
            f"{draft_config or 'assumed EAGLE-3 head of the target shape'}\n" + plan.report())
