"""The typed values of ``cast-autotune``'s flags.

Each group here is the dataclass of one flag group of `autotune.parser` (``add_db``
→ `DbOptions`, ``add_models`` → `ModelOptions`, ...), its fields named as argparse
names the values.  A command's options dataclass (``ProfileOptions`` in
``autotune/commands/profile.py``, ...) inherits the groups it registers, adds its
own flags, and is built once from the parsed namespace with ``from_args``; from
there on the command and its helpers read typed fields, never the namespace.  A
helper that needs one group takes that group's type, so any command's options fit.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Self

from .grid import ProfileGrid
from .space import SearchSpace


@dataclass(frozen=True, kw_only=True)
class Options:
    """Flag values, frozen."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        """The fields of ``cls`` from the namespace `autotune.parser` built."""
        return cls(**{field.name: getattr(args, field.name) for field in dataclasses.fields(cls)})


@dataclass(frozen=True, kw_only=True)
class DbOptions(Options):
    """``add_db``: the SQLite database and how long to wait for its write lock."""

    db: Path
    db_timeout: float


@dataclass(frozen=True, kw_only=True)
class ModelOptions(Options):
    """``add_models``: the target / draft pair and where and how it runs."""

    model_path: str | None
    draft_path: str | None
    device: str | None  # None: cuda if available, else cpu
    dtype: str
    random_draft_seed: int
    threads: int | None
    quiet: bool


@dataclass(frozen=True, kw_only=True)
class WeightFormatOptions(Options):
    """``add_weight_formats``: ``auto`` or canonical format specs, no repeats."""

    weight_formats: str | tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class LabelOptions(Options):
    """``add_label``: the profile label and whether a mismatch with the hardware is accepted."""

    label: str
    force_label: bool


@dataclass(frozen=True, kw_only=True)
class BackendOptions(Options):
    """``add_backend`` and ``add_tp_size``: whose forwards, over how many GPUs."""

    backend: str
    tp_size: int


@dataclass(frozen=True, kw_only=True)
class GridOptions(Options):
    """``add_grid``: the profiling grid and the age beyond which a point is re-measured."""

    batch_sizes: tuple[int, ...]
    ctx_bucket: int
    ctx_buckets: int
    max_n: int
    draft_max_n: int
    n_points: str | tuple[int, ...]
    warmup: int
    repeats: int
    quick: bool
    max_age: float | None  # seconds

    def profile_grid(self) -> ProfileGrid:
        if self.quick:
            return ProfileGrid.quick()
        return ProfileGrid(batch_sizes=self.batch_sizes, ctx_bucket=self.ctx_bucket, ctx_buckets=self.ctx_buckets,
                           max_n=self.max_n, draft_max_n=self.draft_max_n, n_mode=self.n_points,
                           warmup=self.warmup, repeats=self.repeats)

    @property
    def profile_max_age(self) -> timedelta | None:
        return timedelta(seconds=self.max_age) if self.max_age is not None else None


@dataclass(frozen=True, kw_only=True)
class OverheadOptions(Options):
    """``add_overhead``: the host-overhead step design's steps and warm-up."""

    overhead_steps: int
    overhead_warmup: int


@dataclass(frozen=True, kw_only=True)
class ConfirmOptions(Options):
    """``add_confirm``: the live run of tuned settings against plain decoding."""

    dataset: Path | None
    confirm_prompts: int
    live_rounds: int
    confirm_max_new_tokens: int
    context_length: int


@dataclass(frozen=True, kw_only=True)
class SpaceOptions(ConfirmOptions):
    """``add_space``: the tuner's buckets, trials and search space, its live gate and output."""

    buckets: tuple[int, ...]
    trials: int
    c_range: tuple[float, float]
    top_k: int
    max_depth: int
    max_tokens: int
    fifo_max: int
    max_lookup_depth: int
    study: str
    seed: int
    max_traces: int
    trace_dataset: str | None
    live_margin: float
    live_min_speedup: float
    confirm_sets: int
    output: Path | None

    def search_space(self) -> SearchSpace:
        return SearchSpace(c_min=self.c_range[0], c_max=self.c_range[1], max_depth=self.max_depth, top_k=self.top_k,
                           max_tokens=self.max_tokens, fifo_max=self.fifo_max, lookup_depth=self.max_lookup_depth)


@dataclass(frozen=True, kw_only=True)
class RuntimeStateOptions(Options):
    """``add_runtime_states``: the cap and the deployment SGLang's runtime states are sized for."""

    max_states: int
    max_state_memory: float
    state_coverage: float
    gpu_memory_gb: float | None
    serve_context_length: int | None
    max_running_requests: int
