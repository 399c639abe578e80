"""The ``tune`` pipeline shared by the CLI and the daemon: measured costs + stored
traces → one Optuna study per bucket → live confirmation → validated profile."""

from __future__ import annotations

import os
import platform
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import torch

from sglang_cast.cast import PolicySettings
from sglang_cast.profile import LoadedProfile, Profile

from .confirm import Confirmation, confirm_live
from .costs import measured_costs
from .errors import AutotuneError
from .models import ModelPair
from .prompts import PromptSet
from .publish import publish
from .space import SearchSpace
from .store import Setup, Store, package_version
from .tuner import BucketResult, assign_buckets, even_sample, tune_bucket, vanilla_if_faster

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
    confirm_prompts: int = 4  # 0 skips the live confirmation
    confirm_max_new_tokens: int = 32
    context_length: int = 2048


@dataclass(frozen=True)
class TuneOutcome:
    published: LoadedProfile
    results: list[BucketResult]
    confirmations: list[Confirmation]


def _versions() -> dict[str, str]:
    return {"torch": str(torch.__version__), "sglang_cast": package_version(), "optuna": version("optuna"),
            "python": platform.python_version()}


def tune_and_publish(pair: ModelPair, store: Store, setup: Setup, config: TuneConfig, prompts: PromptSet, *,
                     stop: threading.Event | None = None, progress: bool = True) -> TuneOutcome | None:
    """Tune every bucket, confirm live, publish.  Returns ``None`` (and publishes
    nothing) when ``stop`` is set before the pipeline finished."""
    costs = measured_costs(store, setup)
    stored = store.traces(pair.target_id, pair.draft_id, dataset=config.dataset)
    if not stored:
        raise AutotuneError(f"no traces in {store.path} for {pair.target_id} + {pair.draft_id}; "
                            "run `cast-autotune collect` first")
    usable = [s for s in stored
              if s.trace.top_k >= config.space.top_k and int(s.trace.tree.depths.max()) >= config.space.max_depth]
    if not usable:
        recorded = sorted({(s.trace.top_k, int(s.trace.tree.depths.max())) for s in stored})
        raise AutotuneError(f"--top-k/--max-depth: no stored trace covers the space (top_k <= {config.space.top_k}, "
                            f"depth <= {config.space.max_depth}); recorded (top_k, depth): {recorded}; collect "
                            "with a larger shape or shrink the space")
    prefix = config.study_prefix or f"{config.label}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    by_bucket = assign_buckets(usable, config.buckets)
    results = []
    for size, bucket_traces in by_bucket.items():
        sample = even_sample([s.trace for s in bucket_traces], config.max_traces)
        results.append(vanilla_if_faster(tune_bucket(store, f"{prefix}-b{size}", sample, costs.costs, size,
                                                     config.space, config.trials, config.seed, stop, progress)))
        if stop is not None and stop.is_set():
            return None
    settings = PolicySettings(buckets=tuple(r.settings for r in results), costs=costs.costs)

    confirmations = []
    if config.confirm_prompts > 0:
        for size, bucket_traces in by_bucket.items():
            batch = max(s.batch_size for s in bucket_traces)
            confirmations.append(confirm_live(pair, settings, prompts.head(max(config.confirm_prompts, batch)),
                                              batch, config.confirm_max_new_tokens, config.context_length,
                                              bucket_traces))
            if stop is not None and stop.is_set():
                return None

    notes = [RANDOM_HEAD_NOTE] if pair.random_draft else []
    provenance = {
        "tool": "cast-autotune tune",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "db": str(store.path),
        "study_prefix": prefix,
        "versions": _versions(),
        "machine": {"device_type": pair.device.type, "cpu_count": os.cpu_count(),
                    "torch_threads": torch.get_num_threads()},
        "cost_tables": costs.provenance(),
        "traces": {"dataset": config.dataset or "all", "stored": len(stored), "usable": len(usable),
                   "per_bucket": {str(k): len(v) for k, v in by_bucket.items()}, "max_per_bucket": config.max_traces},
        "search_space": {"c_range": [config.space.c_min, config.space.c_max], "top_k": [1, config.space.top_k],
                         "max_depth": [1, config.space.max_depth], "num_verify_tokens": [2, config.space.max_tokens],
                         "fifo_len": [1, config.space.fifo_max], "trials_per_bucket": config.trials},
        "tuning": [r.summary() for r in results],
        "live_confirmation": [c.summary() for c in confirmations] or "skipped (--confirm-prompts 0)",
        "notes": notes,
    }
    profile = Profile(label=config.label, device=setup.device, source="measured", settings=settings,
                      model={"target": pair.target_id, "draft": pair.draft_id, "dtype": pair.dtype},
                      provenance=provenance)
    published = publish(profile, config.output, store, results[0].study, results[0].trial)
    for result in results[1:]:
        store.record_publication(published.path.resolve(), config.label, published.version, "measured",
                                 result.study, result.trial)
    return TuneOutcome(published, results, confirmations)
