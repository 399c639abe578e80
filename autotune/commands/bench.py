"""``cast-autotune bench``: the tuner against an exhaustive grid, and replay against
live decoding (autotune/bench.py), as JSON."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..bench import BenchConfig, run_bench
from ..options import ConfirmOptions, DbOptions, ModelOptions
from ..prompts import load_prompts
from ..space import Grid
from .common import current_setup, load_pair, open_store, resolve_device


@dataclass(frozen=True, kw_only=True)
class BenchOptions(ModelOptions, ConfirmOptions, DbOptions):
    batch_sizes: tuple[int, ...]  # traces with batch size in [first, last]
    grid_c: tuple[float, ...]
    grid_depths: tuple[int, ...]
    grid_top_ks: tuple[int, ...]
    grid_budgets: tuple[int, ...]
    grid_fifo: tuple[int, ...]
    trials: int  # 0: 10 % of the grid
    seeds: tuple[int, ...]
    max_traces: int
    study: str  # "": bench-<UTC time>
    json: Path | None


def run(args: argparse.Namespace) -> int:
    options = BenchOptions.from_args(args)
    device = resolve_device(options)
    grid = Grid(options.grid_c, options.grid_depths, options.grid_top_ks, options.grid_budgets, options.grid_fifo)
    trials = options.trials or max(1, int(0.1 * len(grid)))
    lo, hi = options.batch_sizes[0], options.batch_sizes[-1]
    study = options.study or f"bench-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    config = BenchConfig(lo, hi, grid, trials, options.seeds, options.max_traces, options.confirm_prompts,
                         options.confirm_max_new_tokens, options.context_length, study, options.live_rounds)
    prompts = load_prompts(options.dataset)
    store = open_store(options)
    pair = load_pair(options, device)
    result = run_bench(pair, store, current_setup(pair, device), config, prompts, progress=not options.quiet)
    text = json.dumps(result, indent=2)
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(text + "\n")
    print(text)
    return 0
