"""Ops inside the draft head's forwards of one shape during a B = 1 CAST decode:
calls and self µs per forward by op, and the forward's wall ms (torch.profiler).
Usage: draft_ops.py PROFILE DATASET PROMPTS [MAX_TOKENS]"""
import collections, statistics, sys, time
from setup_b1 import setup
from torch.profiler import ProfilerActivity, profile, record_function
from sglang_cast.engine.runner import SpeculativeRunner

profile_path, dataset, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 4
run = setup(profile_path, dataset, n)
print('weight format', run.weight_format)
texts, params, engine = run.texts, run.params, run.engine('cast')
orig = SpeculativeRunner.draft_forward
wall = collections.defaultdict(list)
def ranged(self, tokens, *a, **k):
    small = tokens.shape[1] <= max_tokens
    with record_function('draft.small' if small else 'draft.large'):
        t = time.perf_counter(); r = orig(self, tokens, *a, **k)
        if small: wall[tuple(tokens.shape)].append((time.perf_counter() - t) * 1e3)
        return r
SpeculativeRunner.draft_forward = ranged
with profile(activities=[ProfilerActivity.CPU]) as prof:
    engine.generate(texts, params)
ranges = [e for e in prof.events() if e.name == 'draft.small']
calls, self_us = collections.Counter(), collections.Counter()
stack = [c for r in ranges for c in r.cpu_children]
while stack:
    e = stack.pop(); calls[e.name] += 1; self_us[e.name] += e.self_cpu_time_total; stack.extend(e.cpu_children)
k = len(ranges)
print(f"{k} draft forwards of <= {max_tokens} tokens; wall under profiler {statistics.fmean(r.cpu_time_total for r in ranges) / 1e3:.2f} ms;"
      f" {sum(calls.values()) / k:.0f} ops, self {sum(self_us.values()) / k:.0f} us per forward")
for s, v in sorted(wall.items()):
    print(f"  {s}: {len(v)} forwards, median wall {statistics.median(v):.2f} ms")
for name, us in self_us.most_common(30):
    print(f"  {name:40s} {calls[name] / k:6.2f} calls {us / k:8.1f} us self")
