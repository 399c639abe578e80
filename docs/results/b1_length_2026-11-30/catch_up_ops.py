"""Where the draft's catch-up forward spends its time at B = 1 (CAST, profiles/cpu.yaml):
torch profiler over whole generations, the catch-up's operators summed by name.
Prompts go in as raw text (no chat template), as in b1_step_gap_2026-11-30/step_gap.py:
this times stages; acceptance is measured with the chat template in by_position.py.

    .venv/bin/python docs/results/b1_length_2026-11-30/catch_up_ops.py mt_bench 3 [weight-format]
"""
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from sglang_cast.cast import SamplingParams  # noqa: E402
from sglang_cast.engine import EngineArgs, build_engine  # noqa: E402
from sglang_cast.engine.runner import SpeculativeRunner  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

torch.set_num_threads(2)
ds, n = sys.argv[1], int(sys.argv[2])
fmt = sys.argv[3] if len(sys.argv) > 3 else "auto"
lines = [json.loads(line) for line in (ROOT / f"datasets/{ds}.jsonl").read_text().splitlines()]
prompts = [x["turns"][0] if "turns" in x else x["prompt"] for x in lines][:n]
loaded = load_profile(str(ROOT / "profiles/cpu.yaml"))
engine = build_engine(EngineArgs(policy="cast", settings=loaded.profile.settings, profile=loaded.profile,
                                 max_batch_size=1, weight_format=fmt))
_catch_up = SpeculativeRunner._draft_catch_up


def marked(self, *args, **kwargs):
    with record_function("CATCH_UP"):
        return _catch_up(self, *args, **kwargs)


SpeculativeRunner._draft_catch_up = marked
params = SamplingParams(max_new_tokens=64, temperature=0.0, ignore_eos=True)
engine.generate([prompts[0]], SamplingParams(max_new_tokens=16, temperature=0.0))
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for p in prompts:
        engine.generate([p], params)
events = prof.events()
regions = [e for e in events if e.name == "CATCH_UP"]
inside = collections.defaultdict(lambda: [0.0, 0])
def walk(e):
    for c in e.cpu_children:
        inside[c.name][0] += c.self_cpu_time_total
        inside[c.name][1] += 1
        walk(c)
for r in regions:
    walk(r)
total = sum(r.cpu_time_total for r in regions)
calls = sum(c for _, c in inside.values()) / len(regions)
print(f"{len(regions)} catch-ups, {total / len(regions) / 1000:.3f} ms each (wall, profiler on), "
      f"{calls:.0f} operator calls each (nested ones included)")


def linears(region):
    """The int8 matmuls of one catch-up in call order: fc, q, k, v, o, gate, up, down, lm_head."""
    found = []

    def collect(e):
        for c in e.cpu_children:
            if c.name == "aten::_weight_int8pack_mm":
                found.append(c.cpu_time_total)
            collect(c)
    collect(region)
    return found


per_call = [linears(r) for r in regions]
per_call = [x for x in per_call if len(x) == len(per_call[0])]
means = [sum(x[i] for x in per_call) / len(per_call) / 1000 for i in range(len(per_call[0]))]
print("int8 matmuls in call order (fc, q, k, v, o, gate, up, down, lm_head), ms each: "
      + ", ".join(f"{m:.3f}" for m in means))
print("operator | self ms per catch-up | calls per catch-up")
for name, (us, calls) in sorted(inside.items(), key=lambda kv: -kv[1][0])[:25]:
    print(f"{name:50s} {us / len(regions) / 1000:7.3f} {calls / len(regions):5.1f}")
