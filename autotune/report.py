"""``show``: the database as text — cost curves, traces, tuning history, publications.

Cost curves are printed as timed (never interpolated) medians with the ratio
``f(B, c, n) / f(B, c, 1)``, the quantity CAST's decisions actually read.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import optuna
from sqlalchemy import func, select

from .store import Measurement, Setup, Store, TraceRecord
from .tuner import storage


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


def show(store: Store, setup_index: int = 0, study_filter: str = "", per_trial: bool = False) -> str:
    setups = store.setups()
    sections = [f"database: {store.path}", "== measurement setups ==\n" + setups_table(store)]
    if setups:
        setup: Setup = setups[min(setup_index, len(setups) - 1)]
        rows = store.measurements(setup)
        sections.append(f"== cost curves of setup #{min(setup_index, len(setups) - 1)} (timed points only) ==\n"
                        + cost_curves(rows, "target") + "\n\n" + cost_curves(rows, "draft"))
    sections.append("== traces ==\n" + traces_table(store))
    sections.append("== tuning history ==\n" + history_table(study_histories(store, study_filter), per_trial))
    sections.append("== published profiles ==\n" + publications_table(store))
    return "\n\n".join(sections)
