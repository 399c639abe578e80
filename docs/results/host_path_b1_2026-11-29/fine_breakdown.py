"""Exclusive wall µs per engine function per iteration of a B = 1 decode (tools/host_work.py's
StageTimer) over a finer set of functions than its BREAKDOWN: the iteration's glue split
into the strategy's draft, the verify inputs, the catch-up, detokenising, the lookup.
Usage: fine_breakdown.py PROFILE DATASET PROMPTS POLICY"""
import statistics, sys
from setup_b1 import setup
from sglang_cast.cast import ContextLookup
from sglang_cast.engine import StepLog, runner as runner_module
from sglang_cast.engine.requests import Request, IncrementalText
from sglang_cast.engine.runner import SpeculativeRunner, PolicySpeculation
from sglang_cast.engine.timing import StageClock
from sglang_cast.models.kv_cache import KVCache
from tools.host_work import StageTimer, BREAKDOWN, _plan_methods

profile, dataset, n, policy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
run = setup(profile, dataset, n)
texts, params, engine = run.texts, run.params, run.engine(policy)
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
