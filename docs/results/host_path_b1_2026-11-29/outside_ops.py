"""Top-level aten ops of a B = 1 decode iteration outside its model forwards, by name:
calls and total µs per iteration (torch.profiler, `tools.step_profile`'s ranges).
Usage: outside_ops.py PROFILE DATASET PROMPTS POLICY"""
import collections, sys
from setup_b1 import setup
from torch.profiler import ProfilerActivity, profile
from tools.step_profile import FORWARD, ITERATION, label_ranges

profile_path, dataset, n, policy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
run = setup(profile_path, dataset, n)
texts, params, engine = run.texts, run.params, run.engine(policy)
label_ranges(engine.runner)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    engine.generate(texts, params)
events = prof.events()
iterations = [e for e in events if e.name == ITERATION]
calls, us = collections.Counter(), collections.Counter()
for it in iterations:
    stack = list(it.cpu_children)
    while stack:
        e = stack.pop()
        if e.name.startswith(FORWARD):
            continue
        if e.name.startswith('aten::'):
            calls[e.name] += 1; us[e.name] += e.cpu_time_total
        else:
            stack.extend(e.cpu_children)
k = len(iterations)
print(f"{policy}: {k} iterations; {sum(calls.values()) / k:.1f} ops, {sum(us.values()) / k:.0f} us in them per iteration")
for name, c in calls.most_common():
    print(f"  {name:36s} {c / k:6.2f} calls {us[name] / k:7.1f} us")
