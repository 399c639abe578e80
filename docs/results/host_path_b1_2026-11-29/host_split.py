"""Host work of a B = 1 decode step on the embedded pair, outside its model forwards:
wall ms per iteration minus the time inside the runner's target and draft forwards,
per policy and thread count, and (with --cprofile) the functions that spend it.
Usage: host_split.py PROFILE DATASET PROMPTS THREADS POLICY[,POLICY] [--cprofile]"""
import cProfile, pstats, statistics, sys, time
from setup_b1 import setup
from sglang_cast.engine import StepLog
from sglang_cast.engine.runner import SpeculativeRunner

profile, dataset, n, threads, policies = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
run = setup(profile, dataset, n, threads)
texts, params = run.texts, run.params
inside = [0.0]
def timed(method):
    def wrapper(self, *a, **k):
        t = time.perf_counter(); r = method(self, *a, **k); inside[0] += time.perf_counter() - t; return r
    return wrapper
SpeculativeRunner.target_forward = timed(SpeculativeRunner.target_forward)
SpeculativeRunner.draft_forward = timed(SpeculativeRunner.draft_forward)
iterate = SpeculativeRunner.iterate
outside = []
def timed_iterate(self, requests):
    inside[0] = 0.0; t = time.perf_counter(); r = iterate(self, requests)
    outside.append((time.perf_counter() - t - inside[0]) * 1e3); return r
SpeculativeRunner.iterate = timed_iterate
for policy in policies.split(','):
    engine = run.engine(policy)
    outside.clear()
    log = StepLog()
    if '--cprofile' in sys.argv:
        prof = cProfile.Profile(); prof.enable()
    engine.generate(texts, params, on_step=log)
    if '--cprofile' in sys.argv:
        prof.disable()
    print(f"{policy} threads {threads}: iterations {len(outside)}; outside forwards median {statistics.median(outside):.3f} ms,"
          f" mean {statistics.fmean(outside):.3f}, p10 {sorted(outside)[len(outside)//10]:.3f}, p90 {sorted(outside)[9*len(outside)//10]:.3f};"
          f" step mean {statistics.fmean(r.step_ms for r in log.records):.2f} ms")
    if '--cprofile' in sys.argv:
        stats = pstats.Stats(prof)
        stats.sort_stats('tottime').print_stats(r'sglang_cast/(engine|cast)|tokeniz|requests', 40)
        stats.print_callees(r'runner.py:\d+\((iterate|verify|_commit_target|_commit_draft|_draft_catch_up|verify_inputs)\)')
