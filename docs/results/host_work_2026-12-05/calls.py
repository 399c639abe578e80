"""Wall us per call of the engine functions around a B = 1 CAST iteration's forwards (forwards included where a
function runs one: feed_backlog), 8 humaneval prompts x 32 tokens, 3 decodes.  Usage (repository root): calls.py"""
import statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs/results/host_path_b1_2026-11-29")); sys.path.insert(0, str(ROOT))
from setup_b1 import setup
from sglang_cast.engine import runner as rm
from sglang_cast.engine.runner import SpeculativeRunner
from sglang_cast.models.kv_cache import KVCache
run = setup("profiles/cpu-avx512.yaml", "datasets/humaneval.jsonl", 8, 2)
engine = run.engine("cast")
times = {}
def wrap(owner, name, label=None):
    f = getattr(owner, name); label = label or name
    def w(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: times.setdefault(label, []).append((time.perf_counter() - t) * 1e6)
    setattr(owner, name, w)
wrap(SpeculativeRunner, "_commit_target"); wrap(SpeculativeRunner, "feed_backlog"); wrap(rm, "graft_lookup")
wrap(SpeculativeRunner, "expander"); wrap(rm, "select_verified"); wrap(rm, "decide_verified"); wrap(SpeculativeRunner, "verify_inputs")
wrap(rm, "accepted_from"); wrap(SpeculativeRunner, "verify")
for _ in range(3): engine.generate(run.texts, run.params)
for k, v in times.items():
    print(f"{k:16s} calls {len(v):4d} median {statistics.median(v):7.1f} mean {statistics.fmean(v):7.1f} us  p90 {statistics.quantiles(v, n=10)[-1]:7.1f}")
