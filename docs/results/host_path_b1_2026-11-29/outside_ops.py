"""Top-level aten ops of a B = 1 decode iteration outside its model forwards, by name:
calls and total µs per iteration (torch.profiler, `tools.step_profile`'s ranges).
Usage: outside_ops.py PROFILE DATASET PROMPTS POLICY"""
import collections, sys
sys.path.insert(0, '/work/main')
import torch
from torch.profiler import ProfilerActivity, profile
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine.format_choice import choose_weight_format
from tools.benchkit.inputs import load_settings
from tools.step_profile import FORWARD, ITERATION, label_ranges

profile_path, dataset, n, policy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(2)
loaded = load_settings(profile_path, 'cpu').profile
wf = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=wf)
texts = [pair.format_prompt(t) for t in load_prompts(dataset).texts[:n]]
ctx = max(len(pair.tokenizer.encode(t)) for t in texts) + 40
engine = pair.engine(make_policy(policy, loaded.settings), 1, ctx)
params = SamplingParams(max_new_tokens=32)
engine.generate(texts[:2], params)
label_ranges(engine.runner)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    engine.generate(texts, params)
events = prof.events()
iterations = [e for e in events if e.name == ITERATION]
calls, us = collections.Counter(), collections.Counter()
other_us = 0.0
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
