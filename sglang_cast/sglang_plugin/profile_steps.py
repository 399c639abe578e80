"""``cast-autotune profile --backend sglang``, second half: time whole SGLang
iterations of the CAST worker for the host-overhead table.

The step design is the native one (``autotune.overhead.StepDesign``): plain
decoding and EAGLE-2 trees of depth 1..H, a top-1 chain and a top-K tree per
depth, at every profiled batch size.  Each design run is one SGLang engine
(``sglang.Engine``, its scheduler in its own process, as a deployment runs it):

* a tree run starts the CAST worker at exactly that tree (``--speculative-num-steps
  d --speculative-eagle-topk K --speculative-num-draft-tokens m``, one runtime state)
  with the worker's policy swapped for EAGLE-2 (``StepProfileMode.policy``), so
  every iteration drafts ``d`` layers and verifies ``m - 1`` nodes;
* the plain run starts it on a profile whose one bucket says ``speculate: false``,
  so every iteration runs SGLang's zero-step state (what a ``speculate: false``
  bucket costs under the plugin, its draft-extend included).

Every batch size of a run is served by the same engine, one batch after the
other: ``B`` prompts sent together, decoding until each has its tokens.  The
worker logs each decode iteration (``step_log``); the first ``warmup`` of a batch
are not kept (first use of their shapes), then at most ``steps``.

The design profiles carry the setup's forward tables (no overhead), so each
logged step is charged against the tables just profiled.  Forwards are timed
with CUDA graphs off and so are these steps: both sides eager, the residual is
the eager iteration's host work; a deployment with CUDA graphs pays less, so the
table errs towards charging speculation too much, never too little.

Runs on SGLang's CPU engine (``cast-autotune profile --backend sglang`` without a
GPU; a chain or plain decoding starts SGLang at CAST's smallest top-k, 2, its
bucket keeping top-k 1); never run on CUDA.  The design profiles, the engines'
arguments and the collection of logged steps are tested with a stand-in engine
(tests/plugin/test_sglang_plugin_steps.py).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..cast import BucketSettings, CostModel, OverheadTable, PolicySettings, TreeShape
from ..cast.overhead import TERMS
from ..profile import Profile, save_profile
from .plugin_config import PROFILE_ENV, StaticShape
from .profile_forwards import SGLangProfileLaunch
from .step_log import STEP_PROFILE_ENV, LoggedStep, StepProfileMode, read_steps

PLAIN_SHAPE = TreeShape(1, 1, 2)  # the plain run's startup tree: the smallest SGLang accepts (never drafted)


@dataclass(frozen=True)
class StepRun:
    """One engine of the design: ``shape`` is the tree every iteration runs, ``None``
    for plain decoding."""

    shape: TreeShape | None

    @property
    def startup(self) -> TreeShape:
        return self.shape or PLAIN_SHAPE

    def mode(self, log: Path) -> StepProfileMode:
        """Every run starts the CAST algorithm; a tree run's policy is replaced by
        EAGLE-2, the plain run's CAST policy reads the profile's ``speculate: false``."""
        return StepProfileMode(str(log), None if self.shape is None else "eagle2")

    def profile(self, forwards: CostModel, launch: SGLangProfileLaunch) -> Profile:
        """The profile this run's worker loads: the forward tables, a zero host
        overhead (what the steps measure; ``charge(host=False)`` ignores it either way)
        and one bucket at the run's tree, built as its one runtime state (plain: the
        zero-step state)."""
        shape, target = self.startup, forwards.target
        zero = OverheadTable(target.bucket, target.num_buckets, target.batch_sizes,
                             torch.zeros(len(target.batch_sizes), target.num_buckets, len(TERMS), dtype=torch.float64))
        forwards = replace(forwards, overhead=zero)
        bucket = BucketSettings(max_batch_size=1 << 30, shape=shape, speculate=self.shape is not None)
        section = {"parallel": {"tp_size": launch.tp_size, "pp_size": 1}}
        if self.shape is not None:
            section["runtime_states"] = [[shape.max_depth, shape.num_verify_tokens]]
        provenance = {"sglang": section,
                      "step_design": "cast-autotune profile --backend sglang (one run of the host-overhead design)"}
        return Profile("sglang-step-design", launch.torch_device.type, "measured", PolicySettings((bucket,), forwards),
                       provenance=provenance)

    def argv(self, launch: SGLangProfileLaunch) -> list[str]:
        """SGLang's command line for this run: the profiling launch (eager, no radix
        cache, no overlap) with the CAST algorithm at this run's tree."""
        shape = StaticShape.holding([self.startup])  # a chain (or plain decoding) at CAST's smallest top-k
        return launch.argv(algorithm="CAST", num_steps=shape.num_steps, topk=shape.topk,
                           num_draft_tokens=shape.num_draft_tokens)


@contextmanager
def step_environment(profile_path: Path, mode: StepProfileMode) -> Iterator[None]:
    """The variables SGLang's processes read while this run's engine starts and
    serves (they inherit them), restored afterwards."""
    saved = {name: os.environ.get(name) for name in (PROFILE_ENV, STEP_PROFILE_ENV)}
    os.environ[PROFILE_ENV] = str(profile_path)
    os.environ[STEP_PROFILE_ENV] = mode.to_env()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def start_engine(argv: list[str]):
    """SGLang's offline engine for ``argv`` (its scheduler runs in a child process,
    loading the plugin from the package's entry point)."""
    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args

    load_plugins()  # CAST registered here before the arguments are resolved
    return Engine(server_args=prepare_server_args(argv))  # engine.py:278 takes ready server_args


def decode(engine, prompts: Sequence[str], max_new_tokens: int) -> None:
    """One batch on ``engine``: ``prompts`` sent together, greedy, each to
    ``max_new_tokens`` (EOS ignored, so the batch stays whole to its end)."""
    engine.generate(prompt=list(prompts),
                    sampling_params={"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0.0})


class SGLangStepTimer:
    """Times the design's runs through SGLang engines, one engine per run, reused
    for every batch size of that run.  ``engine_factory(argv)`` starts an engine
    (``start_engine``; tests pass a stand-in with ``generate`` and ``shutdown``)."""

    def __init__(self, launch: SGLangProfileLaunch, forwards: CostModel, workdir: Path | None = None,
                 engine_factory: Callable[[list[str]], object] = start_engine) -> None:
        self.launch, self.forwards = launch, forwards
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="cast-sglang-steps-"))
        self.engine_factory = engine_factory
        self._run: StepRun | None = None
        self._engine = None
        self._log: Path | None = None  # the running engine's step log
        self._offset = 0  # bytes of it already read

    def time(self, shape: TreeShape | None, prompts: Sequence[str], new_tokens: int, warmup: int,
             steps: int) -> list[LoggedStep]:
        """Decode ``prompts`` (one batch, sent together) for ``new_tokens`` each at
        ``shape`` (``None``: plain) and return the batch's kept iterations."""
        self._use(StepRun(shape))
        decode(self._engine, prompts, new_tokens)
        logged, self._offset = read_steps(self._log, self._offset)
        return logged[warmup: warmup + steps]

    def _use(self, run: StepRun) -> None:
        if run == self._run:
            return
        self.close()
        index = len(list(self.workdir.glob("run-*.yaml")))
        profile_path = save_profile(run.profile(self.forwards, self.launch),
                                    self.workdir / f"run-{index}.yaml")
        self._log, self._offset = self.workdir / f"run-{index}.jsonl", 0
        with step_environment(profile_path, run.mode(self._log)), self.launch.resolving():
            self._engine = self.engine_factory(run.argv(self.launch))
        self._run = run

    def close(self) -> None:
        """Shut the running engine down (SGLang's ``shutdown`` waits until its GPU
        memory is released, so the next run's engine can take it)."""
        if self._engine is not None:
            self._engine.shutdown()
        self._engine = self._run = None
