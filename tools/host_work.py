"""Host work of a decode iteration outside the model forwards, per policy and batch size.

    python tools/host_work.py --policies vanilla,eagle2,cast --batch-size 1,4 --json out.json

Runs the engine on the tiny random target and EAGLE head (two layers of width
32: their forwards cost little), so what an iteration spends outside its forwards
stands out: the policy's decisions, the draft tree's and the caches' bookkeeping, the
verification.  On a GPU the forwards replay as CUDA graphs and this is the host time
and the eager launches between them, which a batch-1 iteration waits on.

Per (policy, batch size) it reports the median over ``--rounds`` decodes of

* ``outside_forwards_ms``: wall ms per iteration minus the time inside the runner's
  target and draft forwards (``perf_counter`` around them; on the CPU a forward
  returns when it is done);
* ``outside_forwards_ops``: top-level aten ops per iteration outside the forwards
  (one extra decode under ``torch.profiler``; views included, each a dispatch);
* ``depth``: drafted layers per iteration (host work grows with it);
* ``device_ops``: torch ops per iteration outside the forwards on data the engine
  keeps or sends to its device, views aside: what would launch a kernel (or copy) on
  a GPU.  One more decode with the caches, the draft's root outputs and everything
  sent through ``to_device`` marked as device data (`DeviceOps`, `tools.device_marking`'s
  ``DeviceData``, which catches host reads, counting ops); tensors the engine creates on its
  device with a factory (``torch.ones(..., device=)``) are not marked, so it is a
  lower bound.

``--breakdown`` adds one more decode with a ``perf_counter`` around each engine
function an iteration calls (`BREAKDOWN`) and reports ``breakdown_us``: exclusive wall
µs per iteration of each (a function's time less that of the timed functions it
calls; ``iterate`` is the glue between them).  The wrappers cost ~1 µs per call, so
this decode is not one of the timed rounds.

Compare two checkouts by running each in turn, alternating (the machine's speed
drifts): the same command from each checkout's root.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from sglang_cast.cast import POLICIES, CostModel, DraftTree, PolicySettings, SamplingParams, TreeShape  # noqa: E402
from sglang_cast.cast import expand as cast_expand  # noqa: E402
from sglang_cast.cast import make_policy  # noqa: E402
from sglang_cast.engine import Engine, StepLog  # noqa: E402
from sglang_cast.engine.build import LoadedModels  # noqa: E402
from sglang_cast.engine import runner as runner_module  # noqa: E402
from sglang_cast.engine.draft_expander import DraftExpander  # noqa: E402
from sglang_cast.engine.runner import SpeculativeRunner  # noqa: E402
from tools.device_marking import SENDERS, DeviceData, mark_engine  # noqa: E402
from tools.tiny_models import CharTokenizer, random_pair  # noqa: E402
from tools.benchkit.cli import require_positive  # noqa: E402
from tools.step_profile import FORWARD, ITERATION, label_ranges, outside_forwards  # noqa: E402

PROMPTS = ["hello world", "trees and more", "speculative", "decoding on a cpu"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", default="vanilla,eagle2,cast", help=f"comma-separated, of {', '.join(POLICIES)}")
    p.add_argument("--batch-size", default="1,4", help="comma-separated batch sizes")
    p.add_argument("--top-k", type=int, default=7)
    p.add_argument("--max-depth", type=int, default=4)
    p.add_argument("--num-verify-tokens", type=int, default=40)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--breakdown", action="store_true",
                   help="also report exclusive wall µs per iteration of each engine function (one more decode)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    args.policies = [name.strip() for name in args.policies.split(",") if name.strip()]
    unknown = [name for name in args.policies if name not in POLICIES]
    if unknown or not args.policies:
        p.error(f"--policies: unknown {unknown or 'none given'}; accepted: {', '.join(POLICIES)}")
    try:
        args.batch_size = [int(b) for b in args.batch_size.split(",")]
    except ValueError:
        p.error(f"--batch-size: expected comma-separated integers, got {args.batch_size!r}")
    require_positive(p, args, "top_k", "max_depth", "max_new_tokens", "rounds")
    if min(args.batch_size) < 1:
        p.error(f"--batch-size: every size must be >= 1, got {args.batch_size}")
    if args.num_verify_tokens < 2:
        p.error(f"--num-verify-tokens: must be >= 2, got {args.num_verify_tokens}")
    return args


# The runner's two forwards: what ``outside_forwards_ms`` subtracts from each step.
FORWARDS = [(SpeculativeRunner, "target_forward"), (SpeculativeRunner, "draft_forward")]
# What ``--breakdown`` times: (owner, attribute), the owner a class or the module whose
# global the caller looks the function up in.  The policies' ``keep``/``grow`` are added
# per plan class (`_plan_methods`).
BREAKDOWN = FORWARDS + [(SpeculativeRunner, name) for name in ("iterate", "verify", "_commit_target",
                                                                "_commit_draft", "feed_backlog")]
BREAKDOWN += [(runner_module, name) for name in ("grow_tree", "decide_verified", "select_verified", "accepted_from")]
BREAKDOWN += [(cast_expand, "ranked_children"), (DraftExpander, "expand"), (DraftTree, "add_layer")]


def _plan_methods() -> list[tuple[type, str]]:
    plans = {policy.plan_class for policy in POLICIES.values()}
    return [(plan, name) for plan in plans for name in ("keep", "grow") if name in vars(plan)]


class StageTimer:
    """Exclusive wall µs per timed function of ``targets`` ((owner, attribute) pairs),
    while installed: a function's time less that of the timed functions it calls."""

    def __init__(self, targets: list[tuple[object, str]]) -> None:
        self.targets = targets
        self.us: collections.Counter[str] = collections.Counter()
        self._children: list[float] = []  # per open call: time spent in timed callees

    def _timed(self, function, label: str):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            self._children.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                elapsed, inner = time.perf_counter() - started, self._children.pop()
                self.us[label] += (elapsed - inner) * 1e6
                if self._children:
                    self._children[-1] += elapsed
        return timed

    @contextlib.contextmanager
    def installed(self):
        saved = [(owner, name, vars(owner)[name]) for owner, name in self.targets]
        try:
            for owner, name, function in saved:
                setattr(owner, name, self._timed(function, f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"))
            yield self
        finally:
            for owner, name, function in saved:
                setattr(owner, name, function)


# Torch functions that make a view or read metadata: no kernel launch.
NO_LAUNCH = frozenset({"view", "view_as", "unsqueeze", "squeeze", "expand", "expand_as", "reshape", "__getitem__",
                       "size", "dim", "numel", "__len__", "is_contiguous", "stride", "data_ptr", "__get__"})


class DeviceOps(DeviceData):
    """`tools.device_marking.DeviceData` (what is computed from it is device data too, ``.cpu()``
    hands back plain host data), counting every op on it (`NO_LAUNCH` aside; the copy
    to the host included) while ``counting``."""

    counted = 0
    counting = False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if DeviceOps.counting and getattr(func, "__name__", "") not in NO_LAUNCH:
            DeviceOps.counted += 1
        return super().__torch_function__(func, types, args, kwargs)


def _counted_between_forwards(function, counting: bool):
    """``function`` with `DeviceOps.counting` set to ``counting`` while it runs."""
    def wrapped(*args, **kwargs):
        saved, DeviceOps.counting = DeviceOps.counting, counting
        try:
            return function(*args, **kwargs)
        finally:
            DeviceOps.counting = saved
    return wrapped


def device_ops(engine: Engine, params: SamplingParams) -> float:
    """Torch ops per iteration on device data outside the forwards (one decode, `DeviceOps`)."""
    mark = lambda tensor: tensor.as_subclass(DeviceOps)  # noqa: E731
    mark_engine(engine, mark)
    methods = {"iterate": True, "target_forward": False, "draft_forward": False}
    saved = {name: vars(SpeculativeRunner)[name] for name in methods}
    senders = {module: module.to_device for module in SENDERS}
    log, DeviceOps.counted = StepLog(), 0
    try:
        for name, counting in methods.items():
            setattr(SpeculativeRunner, name, _counted_between_forwards(saved[name], counting))
        for module in SENDERS:
            module.to_device = lambda host, device: mark(host)
        engine.generate(PROMPTS, params, on_step=log)
    finally:
        for name, function in saved.items():
            setattr(SpeculativeRunner, name, function)
        for module, function in senders.items():
            module.to_device = function
    return DeviceOps.counted / len(log.records)


def tiny_engine(policy: str, batch_size: int, args: argparse.Namespace) -> Engine:
    """The tiny random pair (`tools.tiny_models`) in an engine running ``policy``."""
    torch.manual_seed(0)
    shape = TreeShape(args.top_k, args.max_depth, args.num_verify_tokens)
    settings = PolicySettings.single(CostModel.linear(1.0, 4.0, draft_ratio=0.2), shape=shape)
    target, draft = random_pair("cpu", torch.float32)
    models = LoadedModels(target, draft, CharTokenizer())
    return models.engine(make_policy(policy, settings), batch_size, 64 + args.max_new_tokens)  # + the tree's room


def measure(policy: str, batch_size: int, args: argparse.Namespace) -> dict:
    engine = tiny_engine(policy, batch_size, args)
    params = SamplingParams(max_new_tokens=args.max_new_tokens)
    engine.generate(PROMPTS, params)  # untimed: first use of every shape
    breakdown = None
    if args.breakdown:
        log, timer = StepLog(), StageTimer(BREAKDOWN + _plan_methods())
        with timer.installed():
            engine.generate(PROMPTS * 2, params, on_step=log)
        breakdown = {label: us / len(log.records) for label, us in timer.us.most_common()}
    outside, depth = [], 0.0
    clock = StageTimer(FORWARDS)
    with clock.installed():
        for _ in range(args.rounds):
            log = StepLog()
            clock.us.clear()
            engine.generate(PROMPTS * 2, params, on_step=log)
            records = log.records
            forward_ms = sum(clock.us.values()) / 1e3
            outside.append((sum(r.step_ms for r in records) - forward_ms) / len(records))
            depth = statistics.fmean(r.depth for r in records)
    label_ranges(engine.runner)  # on the instance: after the class-level timers are gone
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        engine.generate(PROMPTS, params)
    _, ops = outside_forwards(prof.events())
    row = {"policy": policy, "batch_size": batch_size, "outside_forwards_ms": statistics.median(outside),
           "outside_forwards_ms_rounds": outside, "outside_forwards_ops": ops, "depth": depth,
           "device_ops": device_ops(tiny_engine(policy, batch_size, args), params)}
    if breakdown is not None:
        row["breakdown_us"] = breakdown
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    rows = [measure(policy, b, args) for policy in args.policies for b in args.batch_size]
    for row in rows:
        print(f"{row['policy']:>8} B={row['batch_size']:<3} outside forwards {row['outside_forwards_ms']:.3f} ms "
              f"[{min(row['outside_forwards_ms_rounds']):.3f}-{max(row['outside_forwards_ms_rounds']):.3f}], "
              f"{row['outside_forwards_ops']:.0f} ops per iteration ({row['device_ops']:.0f} on device data), "
              f"depth {row['depth']:.2f}")
        if "breakdown_us" in row:
            print("    µs per iteration: " + ", ".join(f"{label} {us:.0f}" for label, us in row["breakdown_us"].items()))
    if args.json is not None:
        args.json.write_text(json.dumps({"command": sys.argv, "forward_labels": [ITERATION, FORWARD],
                                         "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
