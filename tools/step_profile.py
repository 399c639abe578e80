"""Where a decode iteration's time goes: torch.profiler over the native engine's decode.

    python tools/step_profile.py --device cuda --dtype bfloat16 --policy cast \
        --profile profiles/h200.yaml --batch-size 1 --num-prompts 4 --max-new-tokens 64 --json out.json

Decodes the prompts once untimed (graphs, allocator, first-use costs), then again under
``torch.profiler`` and writes, per decode iteration: the engine's own draft / verify /
host split (``IterationRecord``), host reads of tensor values (``cudaStreamSynchronize``,
``cudaDeviceSynchronize``, ``aten::item``: device synchronisations on a GPU), host-device
copies, kernel launches and CUDA graph replays, and the ops with the most host (self
CPU) time — all counted inside the iterations' ranges (`InIterations`), so the
admission's prefill is not spread over them.  The prompts are
``autotune/prompts.txt`` (tuning prompts) unless ``--dataset`` says otherwise.

It also splits each iteration (a ``decode.iteration`` range) into the model forwards
(``decode.forward.*`` ranges: on a CPU the forward's compute, on a GPU the host side
of a graph replay or an eager forward) and everything else:
``outside_forwards_ms`` and ``outside_forwards_ops`` (top-level aten ops, views
included) are the policy's decisions and the tree's and caches' bookkeeping, which
on a GPU are host time and launches between the graphs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from autotune.errors import AutotuneError  # noqa: E402
from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import POLICIES, SamplingParams, make_policy  # noqa: E402
from sglang_cast.engine import StepLog  # noqa: E402
from sglang_cast.engine.format_choice import AUTO, choose_weight_format  # noqa: E402
from tools.benchkit.cli import require_positive  # noqa: E402
from tools.benchkit.inputs import BenchError, load_settings  # noqa: E402

# Host-side events that wait for the device or launch work on it (CUDA runtime names).
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::item",
         "aten::_local_scalar_dense")
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
GRAPH_LAUNCHES = ("cudaGraphLaunch",)
COPIES = ("cudaMemcpyAsync", "cudaMemcpy")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--policy", default="cast", choices=sorted(POLICIES))
    p.add_argument("--profile", default=None, help="CAST profile YAML (default: profiles/<label>.yaml)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--num-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--dataset", type=Path, default=None, help="prompts (default: autotune/prompts.txt)")
    p.add_argument("--weight-format", default=AUTO,
                   help="the target's weight format, or auto: the profile's recorded format, else the cheapest "
                        "in a few timed forwards, as the server decides (docs/precision.md)")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--top", type=int, default=25, help="ops listed by self CPU time")
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args(argv)
    require_positive(p, args, "batch_size", "num_prompts", "max_new_tokens")
    return args


# torch.profiler ranges put around a runner's decode iteration and each of its model
# forwards (`label_ranges`), so a profile splits the forwards from the host work between.
ITERATION = "decode.iteration"
FORWARD = "decode.forward"


def label_ranges(runner) -> None:
    """Wrap ``runner``'s iteration and forwards in profiler ranges.  Done on the
    instance by the tools that profile, not in the runner: an idle range still costs
    ~5 µs of host time per call (measured on the AMX Xeon), ~35 µs per iteration."""
    for name, label in (("iterate", ITERATION), ("target_forward", FORWARD + ".target"),
                        ("draft_forward", FORWARD + ".draft")):
        method = getattr(runner, name)

        def ranged(*args, _method=method, _label=label):
            with record_function(_label):
                return _method(*args)

        setattr(runner, name, ranged)


@dataclass
class InIterations:
    """Every profiler event inside the ``decode.iteration`` ranges, by name: how many
    and their self CPU µs.  Counted there and not over the whole profile, whose
    admission (an eager prefill forward per prompt group) is not an iteration's work:
    on an H200 a 13-iteration profile charged each iteration 17 of the prefill's matmuls."""

    calls: Counter = field(default_factory=Counter)
    self_us: Counter = field(default_factory=Counter)

    @classmethod
    def of(cls, events) -> InIterations:
        found = cls()
        stack = [child for e in events if e.name == ITERATION for child in e.cpu_children]
        while stack:
            event = stack.pop()
            found.calls[event.name] += 1
            found.self_us[event.name] += event.self_cpu_time_total
            stack.extend(event.cpu_children)
        return found

    def count(self, names: tuple[str, ...]) -> int:
        return sum(self.calls[name] for name in names)


def outside_forwards(events) -> tuple[float, float]:
    """Per decode iteration: host ms and top-level aten ops inside the runner's
    ``decode.iteration`` ranges but outside their ``decode.forward.*`` ranges."""
    iterations = [e for e in events if e.name == ITERATION]
    if not iterations:
        return 0.0, 0.0
    outside_us, ops = 0.0, 0
    for iteration in iterations:
        outside_us += iteration.cpu_time_total
        stack = list(iteration.cpu_children)
        while stack:
            event = stack.pop()
            if event.name.startswith(FORWARD):
                outside_us -= event.cpu_time_total
            elif event.name.startswith("aten::"):
                ops += 1  # a top-level op: its own aten children are its implementation
            else:
                stack.extend(event.cpu_children)
    return outside_us / 1e3 / len(iterations), ops / len(iterations)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:  # the user's inputs first, each refused with its flag named before a model loads
        prompt_set = load_prompts(args.dataset)
        loaded = load_settings(args.profile, args.device).profile
    except (AutotuneError, BenchError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    weight_format = choose_weight_format(args.weight_format, device=args.device, profile=loaded).weight_format
    pair = load_model_pair(None, None, args.device, args.dtype, weight_format=weight_format)
    pair.cuda_graph = not args.disable_cuda_graph
    settings = loaded.settings
    texts = [pair.format_prompt(t) for t in prompt_set.texts[: args.num_prompts]]
    context = max(len(pair.tokenizer.encode(t)) for t in texts) + args.max_new_tokens + 8
    engine = pair.engine(make_policy(args.policy, settings), args.batch_size, context)
    params = SamplingParams(max_new_tokens=args.max_new_tokens)
    engine.generate(texts, params)  # untimed: first use of every shape
    log = StepLog()
    label_ranges(engine.runner)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if pair.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        engine.generate(texts, params, on_step=log)
    events = prof.events()
    outside_ms, outside_ops = outside_forwards(events)
    inside = InIterations.of(events)
    decode = log.records
    if not decode:
        raise SystemExit("error: no decode iteration was recorded (raise --max-new-tokens)")
    iterations = len(decode)
    top = inside.self_us.most_common(args.top)
    result = {
        "device": torch.cuda.get_device_name(pair.device) if pair.device.type == "cuda" else "cpu",
        "weight_format": weight_format, "policy": args.policy, "batch_size": args.batch_size,
        "cuda_graphs": engine.graph_report(),
        "iterations": iterations, "accepted_per_iteration": statistics.fmean(sum(r.accepted) for r in decode),
        "per_iteration": {
            "draft_ms": statistics.fmean(r.draft_ms for r in decode),
            "verify_ms": statistics.fmean(r.verify_ms for r in decode),
            "host_ms": statistics.fmean(r.host_ms for r in decode),
            "step_ms": statistics.fmean(r.step_ms for r in decode),
            "outside_forwards_ms": outside_ms,
            "outside_forwards_ops": outside_ops,
            "syncs": inside.count(SYNCS) / iterations,
            "copies": inside.count(COPIES) / iterations,
            "kernel_launches": inside.count(LAUNCHES) / iterations,
            "graph_launches": inside.count(GRAPH_LAUNCHES) / iterations,
        },
        "top_self_cpu": [{"op": name, "calls_per_iteration": inside.calls[name] / iterations,
                          "self_cpu_us_per_iteration": us / iterations} for name, us in top],
    }
    args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["per_iteration"], indent=1))
    for row in result["top_self_cpu"][:15]:
        print(f"{row['self_cpu_us_per_iteration']:9.1f} us  {row['calls_per_iteration']:7.2f}x  {row['op']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
