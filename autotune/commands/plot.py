"""``cast-autotune plot``: PNG plots of one setup's cost curves and of the tuning
history (matplotlib is imported only by this command)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from .. import report
from ..errors import AutotuneError
from ..options import DbOptions
from ..plots import plot_cost_curves, plot_histories
from .common import open_store


@dataclass(frozen=True, kw_only=True)
class PlotOptions(DbOptions):
    out: Path
    setup: int  # measurement setup (0 = most recent)
    context: int | None  # None: the smallest measured
    study: str
    max_studies: int


def run(args: argparse.Namespace) -> int:
    options = PlotOptions.from_args(args)
    store = open_store(options)
    options.out.mkdir(parents=True, exist_ok=True)
    setups = store.setups()
    written = []
    if setups:
        setup = setups[min(options.setup, len(setups) - 1)]
        rows = store.measurements(setup)
        context = options.context or min(r.context_len for r in rows)
        if context not in {r.context_len for r in rows}:
            raise AutotuneError(f"--context: no measurements at {context}; measured: "
                                f"{sorted({r.context_len for r in rows})}")
        title = (f"{setup.device}, threads={setup.threads} — {setup.target_model} + {setup.draft_model} "
                 f"({setup.dtype}, torch {setup.torch_version})")
        written.append(plot_cost_curves(rows, context, title, options.out / "cost_curves.png"))
    histories = report.study_histories(store, options.study)[-options.max_studies:]
    if histories:
        written.append(plot_histories(histories, options.out / "tuning_history.png"))
    if not written:
        raise AutotuneError(f"--db: nothing to plot in {store.path} (no measurements, no studies)")
    print(report.written(written))
    return 0
