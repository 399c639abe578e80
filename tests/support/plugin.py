"""What the SGLang plugin tests share: the one check of whether SGLang imports here
(`require_sglang`, the ``requires_sglang`` marker's check), cost tables and
settings, the synthetic draft seen through SGLang's multi-step layout
(`worker_iteration`), a stand-in for SGLang's draft runner, and the stand-in
``sglang.Engine`` the step design is profiled against.

Nothing here imports SGLang: `sglang_problem` imports the modules it is asked
about, when it is asked, so this module imports in any venv."""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import os
import random
from dataclasses import replace

import pytest
import torch

from sglang_cast.cast import (BucketSettings, CostModel, CostTable, PolicySettings, Thresholds, TreeShape, charge,
                              decide_verified, make_policy)
from sglang_cast.cast.overhead import OverheadTerms
from sglang_cast.sglang_plugin.cpu_standins import STANDIN_PATH
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.drafting import draft_masked_tree, roots_to_host
from sglang_cast.sglang_plugin.plugin_config import PROFILE_ENV, ParallelLayout, SGLangSection, StaticShape, \
    load_fitting_profile
from sglang_cast.sglang_plugin.step_log import StepLog, StepProfileMode
from support.synthetic import PathModel

# ------------------------------------------------------ does SGLang import here?
SGLANG_VERSION = "0.5.23"
SKIP_TAG = "SGLANG:"  # every skip for want of SGLang says so first; tests/conftest.py counts them
RUN_THEM = "TRITON_INTERPRET=1 .venv-sglang/bin/python -m pytest tests/plugin (bash run.sh test does)"
RUNTIME = "sglang.srt.entrypoints.http_server"  # SGLang's server: what its runtime needs (uvloop, ...)


@functools.cache
def sglang_problem(*modules: str) -> str | None:
    """Why SGLang's ``modules`` do not import in this Python (the first failure, one
    line), or None when they all do.  Imported when asked, once per set, with SGLang's
    Triton kernels interpreted unless the environment says otherwise (the plugin
    tests run them on the CPU: TRITON_INTERPRET is read when a kernel is defined)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if RUNTIME in modules:  # the launcher's own check, the one it refuses on
        from sglang_cast.sglang_plugin.launch import sglang_runtime_problem

        problem = sglang_runtime_problem()
        if problem is not None:
            return problem
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # ImportError, or torchvision's RuntimeError on a CPU-only torch
            return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def skip_reason(problem: str) -> str:
    return f"{SKIP_TAG} SGLang {SGLANG_VERSION} does not import here ({problem})"


def require_sglang(*modules: str) -> None:
    """Skip the calling test module (at its import) or test unless SGLang's ``modules``
    import here; the tagged reason is counted in the run's one ``SGLANG:`` line."""
    problem = sglang_problem(*modules)
    if problem is not None:
        pytest.skip(skip_reason(problem), allow_module_level=True)


# ------------------------------------------------------- costs and settings
def steep_costs() -> CostModel:
    n = torch.arange(1, 65, dtype=torch.float64)
    target = CostTable(512, 4, (1, 8), torch.stack([10 + 0.6 * n**1.2, 30 + 2.0 * n**1.2]).unsqueeze(1).repeat(1, 4, 1))
    draft = CostTable(512, 4, (1, 8), torch.stack([1 + 0.2 * n, 2 + 0.5 * n]).unsqueeze(1).repeat(1, 4, 1))
    return CostModel(target=target, draft=draft)


def two_bucket_settings(thresholds: Thresholds) -> PolicySettings:
    """Batch <= 2: a deep narrow-ish tree; larger batches: a shallower one."""
    return PolicySettings(buckets=(
        BucketSettings(2, TreeShape(top_k=4, max_depth=6, num_verify_tokens=20), thresholds, fifo_len=4),
        BucketSettings(1 << 30, TreeShape(top_k=3, max_depth=4, num_verify_tokens=12), thresholds, fifo_len=4),
    ), costs=steep_costs())


class Float32Model(PathModel):
    """SGLang hands the worker float32 draft probabilities; the native expander
    gets the same float32 numbers, so both trees carry bit-identical values."""

    def draft_probs(self, path):
        return super().draft_probs(path).float().double()


class SGLangLayoutDraft:
    """The same draft model seen through SGLang's multi-step layout: every call
    gets the ``[B·K]`` frontier tokens and each row's parent row, and answers each
    row's best ``K`` children (what one EAGLE draft forward + top-k produces)."""

    def __init__(self, model: PathModel, roots: torch.Tensor, topk: int) -> None:
        self.model, self.topk = model, topk
        self.paths = [[(int(root),)] for root in roots]
        self.forwards = 0

    def _children(self, path):
        top = torch.sort(self.model.draft_probs(path), descending=True, stable=True)
        return top.values[: self.topk].float(), top.indices[: self.topk]

    def root_children(self) -> tuple[torch.Tensor, torch.Tensor]:
        pairs = [self._children(paths[0]) for paths in self.paths]
        return torch.stack([p for p, _ in pairs]), torch.stack([t for _, t in pairs])

    def __call__(self, tokens: torch.Tensor, rows: torch.Tensor | None, step: int):
        self.forwards += 1
        batch, k = len(self.paths), self.topk
        tokens = tokens.view(batch, k)
        self.paths = [[(paths[0] if rows is None else paths[int(rows[b, r])]) + (int(tokens[b, r]),)
                       for r in range(k)] for b, paths in enumerate(self.paths)]
        pairs = [self._children(path) for paths in self.paths for path in paths]
        return torch.stack([p for p, _ in pairs]), torch.stack([t for _, t in pairs])


# --------------------------------------------- the worker's draft, as SGLang lays it out
def worker_iteration(decider: CastDecider, model: PathModel, roots: torch.Tensor, context: int, topk: int,
                     max_steps: int | None, expected_depth: int | None = None):
    """One iteration as the worker drafts it; ``expected_depth`` replaces the plan's
    own prediction (which decides how early draft forwards are launched);
    ``max_steps`` is the runtime state's depth, ``None`` for the one the worker
    picks from the prediction (``CastDecider.depth``).  Returns the plan, the draft,
    the rerank's k, the draft forwards and the depth used."""
    plan = decider.begin(roots.numel(), context)
    draft = SGLangLayoutDraft(model, roots, topk)
    root_probs, root_tokens = draft.root_children()
    roots_host = roots_to_host(root_probs, root_tokens, roots)
    expected = plan.predict_depth(roots_host.values) if expected_depth is None else expected_depth
    if max_steps is None:
        max_steps = decider.depth(expected)
    drafted = draft_masked_tree(plan, root_probs, root_tokens, roots_host, draft, max_steps, expected)
    return plan, drafted, plan.verify_count(drafted.tree), draft.forwards, expected


def unused_forwards(plan, expected_depth: int, max_steps: int) -> int:
    """1 when the draft stopped below the depth its forwards were launched early for."""
    return int(len(plan.kept) < min(expected_depth, plan.max_depth, max_steps))


def no_draft_above_two() -> PolicySettings:
    settings = two_bucket_settings(Thresholds(0.3, 0.5, 0.8))
    return replace(settings, buckets=(settings.buckets[0], replace(settings.buckets[1], speculate=False)))


# ------------------------------------------------------------- launch flags
def launch_args(**overrides) -> argparse.Namespace:
    values = dict(model_path="meta-llama/Llama-3.1-8B-Instruct", speculative_draft_model_path=None,
                  speculative_algorithm="NONE", speculative_num_steps=None, speculative_eagle_topk=None,
                  speculative_num_draft_tokens=None, cast_profile=None, host="127.0.0.1", port=30000,
                  max_running_requests=8, context_length=4096, api_key=None, device="cuda")
    values.update(overrides)
    return argparse.Namespace(**values)


# ------------------------------------------------- SGLang's draft runner, stood in
class PathDraftRunner:
    """Stands in for SGLang's draft ModelRunner on CPU: a node's "hidden state" is
    its token path (padded with -1), and its logits are the synthetic model's
    log-probabilities after that path, so the draft is the same one the native
    engine expands."""

    model_config = argparse.Namespace(model_is_mrope=False)

    def __init__(self, model: Float32Model, width: int) -> None:
        self.model, self.width = model, width
        self.calls = 0

    def encode(self, paths) -> torch.Tensor:
        return torch.tensor([list(p) + [-1] * (self.width - len(p)) for p in paths], dtype=torch.float32)

    def forward(self, batch):
        self.calls += 1
        parents = [tuple(int(t) for t in row if t >= 0) for row in batch.spec_info.hidden_states]
        paths = [parent + (int(token),) for parent, token in zip(parents, batch.input_ids)]
        logits = torch.stack([self.model.draft_probs(p).float().log() for p in paths])
        return argparse.Namespace(logits_output=argparse.Namespace(next_token_logits=logits,
                                                                   hidden_states=self.encode(paths)))


# ------------------------------------------------ sglang.Engine, stood in (step design)
PLANTED = OverheadTerms(plain=0.7, spec_base=1.3, per_layer=0.4, per_token=0.05)  # host ms the stand-in adds


def forward_tables() -> CostModel:
    n = torch.arange(1, 17, dtype=torch.float64)
    target = CostTable(32, 1, (1, 2), torch.stack([10 + 0.5 * n, 14 + 0.9 * n]).unsqueeze(1))
    draft = CostTable(32, 1, (1, 2), torch.stack([1 + 0.1 * n, 1.5 + 0.2 * n]).unsqueeze(1))
    return CostModel(target=target, draft=draft)


class PlantedClock:
    """``engine.timing.start_clock``'s shape over a clock the test advances."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self, device):
        began = self.now
        return lambda: self.now - began


def shape_flags(argv: list[str]) -> StaticShape:
    value = {flag: int(argv[argv.index(flag) + 1]) for flag in (
        "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")}
    return StaticShape(*value.values())


class StandInEngine:
    """``sglang.Engine`` as the step design uses it, on CPU: it reads what SGLang's
    processes would inherit (the profile and the step mode), builds the worker's
    decider, and serves each ``generate`` as one prefill call then decode calls until
    every request has its tokens — each decode call drafting as ``CastDraftWorker.draft``
    does, logged by the plugin's ``StepLog``, the clock advanced by the iteration's
    forwards (the profile's tables; the verify through the log's ``timed_verify``, as
    the worker wraps its target's) plus ``PLANTED`` host work, all of it ``speed`` times
    slower than the tables (a machine drifted since its forwards were profiled)."""

    def __init__(self, argv: list[str], clock: PlantedClock, model: PathModel | None = None,
                 speed: float = 1.0) -> None:
        assert argv[argv.index("--speculative-algorithm") + 1] == "CAST"
        self.argv, self.clock, self.model, self.speed = argv, clock, model or PathModel(vocab=12, seed=3), speed
        self.shape = shape_flags(argv)
        loaded = load_fitting_profile(os.environ[PROFILE_ENV], self.shape, ParallelLayout(1, 1))
        self.mode = StepProfileMode.from_env()
        self.decider = CastDecider(make_policy(self.mode.policy or "cast", loaded.profile.settings), self.shape,
                                   SGLangSection.of(loaded.profile).runtime_states)
        self.log = StepLog(self.mode.log, torch.device("cpu"), clock)
        self.verify_forward = self.log.timed_verify(self.target_forward)
        self.rng = random.Random(0)
        self.shut = False

    def generate(self, prompt: list[str], sampling_params: dict) -> None:
        assert sampling_params["ignore_eos"] and not self.shut
        contexts = [len(p) for p in prompt]
        left = [sampling_params["max_new_tokens"]] * len(prompt)
        self.log.arrive(False)  # the batch's prefill
        self.clock.now += 50.0
        while any(left):
            active = [i for i, n in enumerate(left) if n > 0]
            batch, context = len(active), max(contexts[i] for i in active)
            self.log.arrive(True)
            if self.decider.drafts(batch):
                roots = torch.tensor([contexts[i] % self.model.vocab for i in active])
                plan, drafted, _, _, expected = worker_iteration(self.decider, self.model, roots, context,
                                                                 self.shape.topk, self.shape.num_steps)
                width = self.decider.width(self.decider.depth(expected), decide_verified(plan, drafted.tree),
                                           drafted.tree.size - 1)
                depth, verified = len(plan.kept), width - 1
            else:
                plan, depth, verified = self.decider.begin(batch, context), 0, 0
            accepted = [min(self.rng.randint(1, depth + 1), left[i]) for i in active]  # a path of the tree
            draft_ms, verify_ms = charge(plan, verified, depth, max(accepted) - 1, host=False)
            self.clock.now += (draft_ms + PLANTED.iteration_ms(depth, verified)) * self.speed
            self.verify_forward(verify_ms, is_verify=True)  # timed on its own, as the worker's target calls
            self.log.ran(plan, depth, verified, torch.tensor(accepted))
            for i, n in zip(active, accepted):
                contexts[i] += n
                left[i] -= n

    def target_forward(self, ms: float, is_verify: bool = False) -> None:
        """The target worker's ``forward_batch_generation``: it takes its table's ``ms``
        at the engine's ``speed``."""
        self.clock.now += ms * self.speed

    def shutdown(self) -> None:
        self.shut = True


class StandInFactory:
    def __init__(self, speed: float = 1.0) -> None:
        self.clock, self.engines, self.speed = PlantedClock(), [], speed

    def __call__(self, argv: list[str]) -> StandInEngine:
        self.engines.append(StandInEngine(argv, self.clock, speed=self.speed))
        return self.engines[-1]


def load_standin_shim():
    """The stand-in ``sgl_kernel`` package (it registers ``torch.ops.sgl_kernel.*``).  Loaded
    from its file under a private name, so no test module puts it on ``sys.path``
    for the rest of the session."""
    path = STANDIN_PATH / "sgl_kernel" / "__init__.py"
    spec = importlib.util.spec_from_file_location("_sgl_kernel_standin_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
