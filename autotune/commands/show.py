"""``cast-autotune show``: the database as text (`report.show`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from .. import report
from ..options import DbOptions
from .common import open_store


@dataclass(frozen=True, kw_only=True)
class ShowOptions(DbOptions):
    setup: int  # which measurement setup's curves (0 = most recently measured)
    study: str  # only studies whose name contains this
    trials: bool  # every trial with the best-so-far


def run(args: argparse.Namespace) -> int:
    options = ShowOptions.from_args(args)
    print(report.show(open_store(options), options.setup, options.study, options.trials))
    return 0
