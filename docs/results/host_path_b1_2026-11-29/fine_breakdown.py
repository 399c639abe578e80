"""Exclusive wall µs per engine function per iteration of a B = 1 decode (tools/host_work.py's
StageTimer) over a finer set of functions than its BREAKDOWN: the iteration's glue split
into the strategy's draft, the verify inputs, the catch-up, detokenising, the lookup.
Usage: fine_breakdown.py PROFILE DATASET PROMPTS POLICY"""
import statistics, sys
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy, ContextLookup
from sglang_cast.engine import StepLog, runner as runner_module
from sglang_cast.engine.format_choice import choose_weight_format
from sglang_cast.engine.requests import Request, IncrementalText
from sglang_cast.engine.runner import SpeculativeRunner, PolicySpeculation
from sglang_cast.engine.timing import StageClock
from sglang_cast.models.kv_cache import KVCache
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
extra = [(PolicySpeculation, 'draft'), (SpeculativeRunner, 'verify_inputs'), (SpeculativeRunner, '_draft_catch_up'),
         (SpeculativeRunner, 'expander'), (Request, 'append'), (IncrementalText, 'update'), (ContextLookup, 'propose'),
         (runner_module, 'graft_proposals'), (KVCache, 'commit_lists'), (StageClock, 'mark'), (StageClock, 'read'),
         (next(c for c in type(engine.policy).__mro__ if 'begin' in vars(c)), 'begin')]
log, timer = StepLog(), StageTimer(BREAKDOWN + _plan_methods() + extra)
with timer.installed():
    engine.generate(texts, params, on_step=log)
it = len(log.records)
print(f"{policy} {dataset} iterations {it}; step {statistics.fmean(r.step_ms for r in log.records):.2f} ms")
forwards = sum(us for label, us in timer.us.items() if label.endswith('_forward'))
print(f"  outside the forwards {(sum(timer.us.values()) - forwards) / it:.0f} us/iter")
for label, us in timer.us.most_common():
    print(f"  {label:40s} {us / it:9.0f} us/iter")
