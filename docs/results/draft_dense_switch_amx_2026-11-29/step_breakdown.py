"""Exclusive wall µs per engine function per iteration (tools/host_work.py StageTimer), on the embedded pair with a profile, and each draft forward by shape.  Usage: step_breakdown.py PROFILE DATASET PROMPTS POLICY"""
import sys, time, statistics, collections, json
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine import StepLog
from sglang_cast.engine.format_choice import choose_weight_format
from sglang_cast.engine.runner import SpeculativeRunner
from tools.benchkit.inputs import load_settings
from tools.host_work import StageTimer, BREAKDOWN, _plan_methods

profile, dataset, n, policy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(2)
loaded = load_settings(profile, 'cpu').profile
wf = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=wf)
texts = [pair.format_prompt(t) for t in load_prompts(dataset).texts[:n]]
ctx = max(len(pair.tokenizer.encode(t)) for t in texts) + 40
engine = pair.engine(make_policy(policy, loaded.settings), 1, ctx)
params = SamplingParams(max_new_tokens=32)
engine.generate(texts[:2], params)
# per-shape draft forward timing
shapes = collections.defaultdict(list)
orig = SpeculativeRunner.draft_forward
def df(self, tokens, *a, **k):
    t = time.perf_counter(); r = orig(self, tokens, *a, **k); shapes[tuple(tokens.shape)].append((time.perf_counter() - t) * 1e3); return r
SpeculativeRunner.draft_forward = df
log, timer = StepLog(), StageTimer(BREAKDOWN + _plan_methods())
with timer.installed():
    engine.generate(texts, params, on_step=log)
SpeculativeRunner.draft_forward = orig
it = len(log.records)
print(f"{policy} {dataset} iterations {it}; step {statistics.fmean(r.step_ms for r in log.records):.2f} draft {statistics.fmean(r.draft_ms for r in log.records):.2f} verify {statistics.fmean(r.verify_ms for r in log.records):.2f}")
for label, us in timer.us.most_common():
    print(f"  {label:40s} {us / it:9.0f} us/iter")
for s, v in sorted(shapes.items()):
    print(f"  draft_forward {s}: {len(v)} calls, median {statistics.median(v):.2f} ms, mean {statistics.fmean(v):.2f}")
