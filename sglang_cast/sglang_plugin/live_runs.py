"""Live runs of a candidate profile through SGLang's engine: what ``cast-autotune tune
--backend sglang``'s live gate times (``autotune/sglang_gate.py`` judges them).

A tune for SGLang must be gated on SGLang: its iterations carry the scheduler's and
the worker's own host work, which the native engine's do not (on the AMX Xeon a tree
tuned on SGLang's tables replayed 1.6-1.8x plain decoding and served 0.92-1.09x,
2026-11-30).  One run is one engine (``sglang.Engine``, its scheduler in its own
process, as a deployment runs it) on the candidate profile:

* the CAST run serves the profile as it would be published;
* the plain run serves the same profile with every bucket ``speculate: false``, on
  the same startup tree: what a bucket the gate switches off would serve (SGLang's
  zero-step state, its draft-extend included).

Each run decodes every bucket's prompts at the bucket's batch size, in waves of that
many requests sent together, each to ``max_new_tokens`` (EOS ignored, so a wave's
batch stays whole to its end), after one untimed warm-up wave per batch size (first
use of its shapes).  The worker logs every decode iteration (``step_log``: the
interval from one call of the worker to the next, device-synchronised), and each
slice of a bucket's prompts gets the iterations it ran.  Only one engine runs at a
time: an idle SGLang scheduler keeps polling, which on a 2-core machine would slow
the other.

Launched as the step design's engines are (``profile_steps``: eager, no radix cache,
no overlap).  Tested with the stand-in engine (tests/plugin/test_sglang_plugin_live_runs.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..profile import Profile, save_profile
from .plugin_config import StaticShape
from .profile_forwards import SGLangProfileLaunch
from .profile_steps import decode, start_engine, step_environment
from .step_log import LoggedStep, StepProfileMode, read_steps

WARMUP_TOKENS = 4  # tokens each request of the warm-up wave decodes


def plain_profile(profile: Profile) -> Profile:
    """``profile`` with every bucket decoding plainly (trees and states kept), none
    re-testing speculation (``explore_share`` 0)."""
    buckets = tuple(replace(bucket, speculate=False) for bucket in profile.settings.buckets)
    return replace(profile, settings=replace(profile.settings, buckets=buckets), explore_share=0.0)


class SGLangLiveRuns:
    """Starts one engine per run, on ``launch`` at the candidate profile's startup tree.
    ``engine_factory(argv)``: ``start_engine``; tests pass a stand-in with ``generate``
    and ``shutdown``."""

    def __init__(self, launch: SGLangProfileLaunch, workdir: Path | None = None,
                 engine_factory: Callable[[list[str]], object] = start_engine) -> None:
        self.launch = launch
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="cast-sglang-gate-"))
        self.engine_factory = engine_factory
        self.started = 0  # engines started so far (each run's files are numbered by it)

    def run(self, profile: Profile, plain: bool, slices: dict[int, list[list[str]]],
            max_new_tokens: int) -> dict[int, list[list[LoggedStep]]]:
        """Decode ``slices`` (batch size -> its slices of prompts, each a whole number of
        batches) on one engine serving ``profile`` (``plain``: every bucket off) and
        return each slice's logged decode iterations, in the same layout."""
        shape = StaticShape.covering(profile.settings)
        served = plain_profile(profile) if plain else profile
        index, self.started = self.started, self.started + 1
        path = save_profile(served, self.workdir / f"run-{index}.yaml")
        log = self.workdir / f"run-{index}.jsonl"
        argv = self.launch.argv(algorithm="CAST", num_steps=shape.num_steps, topk=shape.topk,
                                num_draft_tokens=shape.num_draft_tokens)
        with step_environment(path, StepProfileMode(str(log))), self.launch.resolving():
            engine = self.engine_factory(argv)
        try:
            return decode_slices(engine, log, slices, max_new_tokens)
        finally:
            engine.shutdown()


def decode_slices(engine, log: Path, slices: dict[int, list[list[str]]],
                  max_new_tokens: int) -> dict[int, list[list[LoggedStep]]]:
    """Every batch size's slices on ``engine``, in waves of that size; the steps the
    worker logged during each slice (the warm-up wave's read and dropped)."""
    offset = 0
    out: dict[int, list[list[LoggedStep]]] = {}
    for batch_size, parts in slices.items():
        decode(engine, parts[0][:batch_size], WARMUP_TOKENS)
        _, offset = read_steps(log, offset)
        out[batch_size] = []
        for part in parts:
            for start in range(0, len(part), batch_size):
                decode(engine, part[start:start + batch_size], max_new_tokens)
            steps, offset = read_steps(log, offset)
            out[batch_size].append(steps)
    return out
