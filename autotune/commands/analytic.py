"""``cast-autotune analytic``: a roofline profile for a GPU that cannot be measured
here, from its published bandwidth and FLOP rate (autotune/analytic.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sglang_cast.profile import PROFILE_DIR

from .. import report
from ..analytic import analytic_profile
from ..labels import check_label_syntax
from ..options import DbOptions
from ..publish import publish
from .common import open_store


@dataclass(frozen=True, kw_only=True)
class AnalyticOptions(DbOptions):
    label: str  # the GPU whose published numbers price the forwards
    tp_size: int
    model_path: str | None
    draft_path: str | None
    output: Path | None
    record: bool  # also record the publication in --db


def run(args: argparse.Namespace) -> int:
    options = AnalyticOptions.from_args(args)
    label = check_label_syntax(options.label)
    profile = analytic_profile(label, options.model_path, options.draft_path, tp_size=options.tp_size)
    store = open_store(options) if options.record else None
    name = label if options.tp_size == 1 else f"{label}-tp{options.tp_size}"
    published = publish(profile, options.output or PROFILE_DIR / f"{name}.yaml", store)
    print(report.analytic_written(published, profile, options.tp_size))
    return 0
