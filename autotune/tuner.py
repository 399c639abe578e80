"""``tune``: per batch-size bucket, search CAST's settings by trace replay.

The objective of a trial is the throughput ``replay(traces, cast policy)``
predicts on the bucket's traces with the measured cost tables — no model forward
per trial (docs/design/cast.md §8).  Traces go to the first bucket whose ``max_batch_size``
covers their batch size, as ``PolicySettings.for_batch`` assigns live batches.
Studies live in the same SQLite file as the measurements (Optuna RDBStorage), so
a study can be resumed by name and inspected with ``show`` / ``plot``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

import optuna
import torch
from sqlalchemy.exc import DatabaseError

from sglang_cast.cast import (BucketSettings, CostModel, PolicySettings, ReplayResult, Thresholds, TraceIteration,
                              TreeShape, bucket_index, make_policy, replay)

from .errors import RUNTIME, AutotuneError
from .space import SearchSpace
from .store import Store

optuna.logging.set_verbosity(optuna.logging.WARNING)
T = TypeVar("T")

# How far (a fraction) a re-tune's best trial must replay above the incumbent's tree to replace it.
# Replay over the 48 tuning prompts resolves ~±1.3 % (bootstrap over prompts), and in three re-tunes
# on the AVX-512 EPYC picks 0.2-2.4 % above the incumbent in replay ran 0.91-1.00x it live (per-round
# medians): docs/results/2026-12-07_ship_soup33_34_avx512.md.
INCUMBENT_MARGIN = 0.03


def assign_buckets(traces: list[T], bucket_sizes: tuple[int, ...]) -> dict[int, list[T]]:
    """Traces (anything with a ``batch_size``) per bucket; batches larger than
    every bucket go to the last one."""
    by_bucket: dict[int, list[T]] = {size: [] for size in bucket_sizes}
    for trace in traces:
        by_bucket[bucket_sizes[bucket_index(trace.batch_size, bucket_sizes)]].append(trace)
    return by_bucket


def even_sample(traces: list[T], limit: int) -> list[T]:
    """At most ``limit`` traces spread evenly over the list (trial cost is linear in
    traces; consecutive iterations are highly correlated, so spacing loses little)."""
    if len(traces) <= limit:
        return traces
    step = len(traces) / limit
    return [traces[int(i * step)] for i in range(limit)]


@contextmanager
def single_threaded() -> Iterator[None]:
    """Replay is thousands of tiny tensor ops.  With an OpenMP team on every core
    each op pays a fork/join, which on a busy machine costs milliseconds: measured
    here, ``triu`` of a 3×3 mask took 10-19 ms with 2 threads under load and 11 µs
    with one.  Replay therefore runs on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def replay_settings(traces: list[TraceIteration], settings: PolicySettings, policy: str = "cast") -> ReplayResult:
    """Replay with a fresh policy (its depth FIFOs start empty, as on a new server)."""
    with single_threaded():
        return replay(traces, make_policy(policy, settings))


def replay_bucket(traces: list[TraceIteration], bucket: BucketSettings, costs: CostModel,
                  policy: str = "cast") -> ReplayResult:
    return replay_settings(traces, PolicySettings(buckets=(bucket,), costs=costs), policy)


def bucket_from_params(params: dict, max_batch_size: int) -> BucketSettings:
    """Settings of a stored trial (the parameter names ``SearchSpace.suggest`` uses)."""
    shape = TreeShape.fitted(params["top_k"], params["max_depth"], params["num_verify_tokens"])
    return BucketSettings(max_batch_size, shape, Thresholds(params["c1"], params["c2"], params["c3"]),
                          params["fifo_len"], lookup_depth=params.get("lookup_depth", 0))


@dataclass(frozen=True)
class BucketResult:
    settings: BucketSettings
    study: str
    trial: int
    trials: int
    traces: int
    tokens_per_s: float  # replayed throughput of the published settings (the best trial, or the kept incumbent)
    tau: float
    unrecorded: int
    baselines: dict[str, float] = field(default_factory=dict)  # replayed tokens/s: vanilla, eagle2, incumbent, ...
    off_by: str | None = None  # "replay" or "live" when speculation was switched off
    incumbent_kept: bool = False  # the best trial did not replay above the incumbent's tree by the margin

    def summary(self) -> dict:
        return {
            "max_batch_size": self.settings.max_batch_size, "speculate": self.settings.speculate,
            "speculation_off_by": self.off_by, "incumbent_kept": self.incumbent_kept,
            "study": self.study, "best_trial": self.trial,
            "trials": self.trials, "traces": self.traces, "replay_tokens_per_s": round(self.tokens_per_s, 3),
            "replay_tau": round(self.tau, 4), "unrecorded_nodes": self.unrecorded,
            "baselines_tokens_per_s": {k: round(v, 3) for k, v in self.baselines.items()},
        }


def storage(store: Store) -> optuna.storages.RDBStorage:
    try:
        return optuna.storages.RDBStorage(store.url, engine_kwargs={"connect_args": {"timeout": store.timeout_s}})
    except DatabaseError as err:
        raise AutotuneError(f"database {store.path}: Optuna cannot use it ({err.orig})", RUNTIME) from None


def tune_bucket(store: Store, study_name: str, traces: list[TraceIteration], costs: CostModel, max_batch_size: int,
                space: SearchSpace, trials: int, seed: int = 0, stop: threading.Event | None = None,
                progress: bool = True, incumbent: BucketSettings | None = None,
                incumbent_margin: float = INCUMBENT_MARGIN) -> BucketResult:
    """Run (or resume) one bucket's study until it holds ``trials`` finished trials.

    ``incumbent``: the bucket of the profile this tune would replace. When it speculates
    with a tree inside ``space`` (so the traces recorded it), that tree is one of a new
    study's first trials, and its replayed rate is reported beside the pick
    (``baselines``). Unless the best trial replays above it by more than
    ``incumbent_margin`` (a fraction), the incumbent's settings are kept: picks within
    a few per cent of it in replay ran level or slower live (``INCUMBENT_MARGIN``)."""
    incumbent_params = space.params_of(incumbent) if incumbent is not None and incumbent.speculate else None
    if not traces:
        raise AutotuneError(f"--buckets: no traces for the bucket with max_batch_size {max_batch_size}; "
                            "collect with a --batch-size in that bucket")
    study = optuna.create_study(study_name=study_name, storage=storage(store), direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed, multivariate=True),
                                load_if_exists=True)
    study.set_user_attr("max_batch_size", max_batch_size)
    study.set_user_attr("traces", len(traces))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not study.trials:
        for params in space.corners() + ([incumbent_params] if incumbent_params is not None else []):
            study.enqueue_trial(params)

    def objective(trial: optuna.Trial) -> float:
        result = replay_bucket(traces, space.suggest(trial, max_batch_size), costs)
        trial.set_user_attr("tau", result.tau)
        trial.set_user_attr("unrecorded", result.unrecorded)
        return result.tokens_per_s

    def stop_when_asked(study: optuna.Study, _trial) -> None:
        if stop is not None and stop.is_set():
            study.stop()

    remaining = trials - len(done)
    if remaining > 0:
        study.optimize(objective, n_trials=remaining, callbacks=[stop_when_asked], show_progress_bar=progress)
    best = study.best_trial
    settings = bucket_from_params(best.params, max_batch_size)
    baselines = {
        "vanilla": replay_bucket(traces, settings, costs, "vanilla").tokens_per_s,
        "eagle2": replay_bucket(traces, BucketSettings(max_batch_size, TreeShape(space.top_k, space.max_depth,
                                                                                  space.max_tokens)),
                                costs, "eagle2").tokens_per_s,
    }
    finished = len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE])
    if incumbent_params is not None:
        kept = replace(incumbent, max_batch_size=max_batch_size)
        held = replay_bucket(traces, kept, costs)
        baselines["incumbent"] = held.tokens_per_s
        if best.value <= held.tokens_per_s * (1.0 + incumbent_margin):
            trial = next((t.number for t in study.trials if t.params == incumbent_params), best.number)
            return BucketResult(kept, study_name, trial, finished, len(traces), held.tokens_per_s, held.tau,
                                held.unrecorded, {**baselines, "best_trial": best.value}, incumbent_kept=True)
    return BucketResult(settings, study_name, best.number, finished, len(traces), best.value,
                        best.user_attrs.get("tau", 0.0), best.user_attrs.get("unrecorded", 0), baselines)


def replay_filter(result: BucketResult) -> BucketResult:
    """The gate's first filter (the live one is ``gate.py``): when even the best tree
    replays slower than plain decoding on the same traces, the bucket is published
    with speculation off (``BucketSettings.speculate``; the tuned tree stays in the
    file for reference); the live gate still checks its plain rate but never turns
    it on."""
    if result.baselines["vanilla"] <= result.tokens_per_s:
        return result
    return switched_off(result, "replay")


def switched_off(result: BucketResult, by: str) -> BucketResult:
    """``result`` with speculation off, as decided ``by`` replay or the live gate."""
    return replace(result, settings=replace(result.settings, speculate=False),
                   tokens_per_s=result.baselines["vanilla"], tau=1.0, off_by=by)
