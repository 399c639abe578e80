"""``bench``: is the Optuna tuner good enough, and is replay honest?

Two questions, answered on real traces from the database:

1. **Search efficiency.**  Every configuration of a discretised grid over the tuning
   space is replayed (the exhaustive optimum); the tuner (the same ``tune_bucket``
   ``tune`` runs, over the continuous space the grid discretises) gets at most 10 %
   as many evaluations.  Goal: its best reaches ≥ 97 % of the grid's best, for
   every seed tried.
2. **Replay fidelity.**  The tuned settings run live on the engine
   (``confirm_live``); goal: replay's predicted tokens/s within 10 % of the live
   engine's measured tokens/s.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

from sglang_cast.cast import PolicySettings
from sglang_cast.hardware import device_name

from .confirm import confirm_live
from .costs import measured_costs
from .errors import AutotuneError
from .models import ModelPair
from .prompts import PromptSet
from .space import Grid
from .store import Setup, Store
from .tuner import even_sample, replay_bucket, tune_bucket

SEARCH_GOAL = 0.97  # tuned / exhaustive best
BUDGET_GOAL = 0.10  # tuner evaluations / grid size
FIDELITY_GOAL = 0.10  # |live / predicted - 1|


@dataclass(frozen=True)
class BenchConfig:
    min_batch_size: int  # traces with min_batch_size <= batch size <= bucket are replayed
    bucket: int  # the bucket's max_batch_size
    grid: Grid
    trials: int
    seeds: tuple[int, ...] = (0, 1, 2)
    max_traces: int = 60
    confirm_prompts: int = 4
    confirm_max_new_tokens: int = 48
    context_length: int = 2048
    study_prefix: str = "bench"  # studies are <prefix>-seed<seed>
    live_rounds: int = 3  # interleaved live rounds of CAST and of plain decoding


def run_bench(pair: ModelPair, store: Store, setup: Setup, config: BenchConfig, prompts: PromptSet,
              progress: bool = True) -> dict:
    if config.trials > BUDGET_GOAL * len(config.grid):
        raise AutotuneError(f"--trials: at most {int(BUDGET_GOAL * len(config.grid))} (10% of the "
                            f"{len(config.grid)}-configuration grid), got {config.trials}")
    costs = measured_costs(store, setup).costs
    space = config.grid.space()
    in_bucket = [s for s in store.traces(pair.target_id, pair.draft_id)
                 if space.covered_by(s.trace) and config.min_batch_size <= s.batch_size <= config.bucket]
    if not in_bucket:
        raise AutotuneError(f"--batch-sizes: no stored traces with batch size in [{config.min_batch_size}, "
                            f"{config.bucket}] covering top_k {space.top_k} / depth {space.max_depth}; run collect "
                            "first")
    traces = even_sample([s.trace for s in in_bucket], config.max_traces)

    started = time.perf_counter()
    best_value, best_settings = float("-inf"), None
    for settings in tqdm(config.grid.settings(config.bucket), total=len(config.grid), desc="exhaustive grid",
                         disable=not progress):
        value = replay_bucket(traces, settings, costs).tokens_per_s
        if value > best_value:
            best_value, best_settings = value, settings
    grid_seconds = time.perf_counter() - started

    results, seconds = [], []
    for seed in config.seeds:
        started = time.perf_counter()
        results.append(tune_bucket(store, f"{config.study_prefix}-seed{seed}", traces, costs, config.bucket, space,
                                   config.trials, seed=seed, progress=progress))
        seconds.append(time.perf_counter() - started)
    runs = [{"seed": seed, "study": r.study, "trials": r.trials, "best_tokens_per_s": r.tokens_per_s,
             "ratio_to_grid_best": r.tokens_per_s / best_value, "best": r.settings.to_dict(), "seconds": t}
            for seed, r, t in zip(config.seeds, results, seconds)]
    worst = min(results, key=lambda r: r.tokens_per_s)
    tuned = PolicySettings(buckets=(worst.settings,), costs=costs)
    batch = max(t.batch_size for t in traces)
    live = confirm_live(pair, tuned, prompts.head(max(config.confirm_prompts, batch)), batch,
                        config.confirm_max_new_tokens, config.context_length, in_bucket, config.live_rounds)
    fidelity = abs(live.live_over_predicted - 1.0)
    return {
        "command": " ".join(["cast-autotune"] + sys.argv[1:]),
        "machine": {"device": device_name(pair.device), "cpu_count": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()),
                    "torch": str(torch.__version__), "python": platform.python_version()},
        "models": {"target": pair.target_id, "draft": pair.draft_id, "dtype": pair.dtype},
        "bucket_max_batch_size": config.bucket,
        "traces": len(traces),
        "grid": {"size": len(config.grid), "c_values": list(config.grid.c_values), "depths": list(config.grid.depths),
                 "top_ks": list(config.grid.top_ks), "budgets": list(config.grid.budgets),
                 "fifo_lens": list(config.grid.fifo_lens), "seconds": grid_seconds,
                 "best_tokens_per_s": best_value, "best": best_settings.to_dict()},
        "tuner": runs,
        "replay_baselines_tokens_per_s": worst.baselines,
        "live_confirmation": live.summary(),
        "goals": {
            "tuned_over_grid_best_min": worst.tokens_per_s / best_value, "search_goal": SEARCH_GOAL,
            "search_met": worst.tokens_per_s / best_value >= SEARCH_GOAL,
            "evaluations_fraction": config.trials / len(config.grid), "budget_goal": BUDGET_GOAL,
            "live_over_predicted": live.live_over_predicted, "fidelity_goal": FIDELITY_GOAL,
            "fidelity_met": fidelity <= FIDELITY_GOAL,
            "live_over_predicted_at_profile_speed": live.live_over_predicted_at_profile_speed,
            "fidelity_met_at_profile_speed": abs(live.live_over_predicted_at_profile_speed - 1.0) <= FIDELITY_GOAL,
        },
    }
