"""Draft forward per format: warm (back-to-back), cold (after a 256 MB sweep), and prefill sizes."""
import sys, time, statistics
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from sglang_cast.engine.table_calibration import role_timer
from sglang_cast.models.attention import causal_tree_mask
torch.set_num_threads(2)
fmts = sys.argv[1].split(',')
timers = {}
for f in fmts:
    pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=f"int4/int8:dense16:bf16+{f}" if f != 'fp32' else "int4/int8:dense16:bf16")
    timers[f] = role_timer(pair.target, pair.draft, 'draft', 1, 400, None)
def call(timer, n, ctx):
    cache = timer.cache; slots = torch.arange(1); cache.lens[slots] = ctx
    tokens = torch.randint(0, 1000, (1, n)); positions = ctx + torch.arange(n).expand(1, n)
    mask = causal_tree_mask(1, n, 'cpu'); f = torch.randn(1, n, 1728)
    return timer.call(tokens, f, positions, slots, mask)
def timed(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
buf = torch.empty(256 * 2**20 // 4)
res = {}
with torch.inference_mode():
    calls = {(f, n): call(timers[f], n, 0 if n > 16 else 128) for f in fmts for n in (1, 2, 4, 128, 200)}
    for c in calls.values(): c(); c()
    for r in range(9):
        for (f, n), c in calls.items():
            if n <= 4:
                buf.add_(1.0); res.setdefault((f, n, 'cold'), []).append(timed(c))
                res.setdefault((f, n, 'warm'), []).append(timed(c))
            elif r < 5:
                res.setdefault((f, n, 'prefill'), []).append(timed(c))
for k, v in sorted(res.items()):
    print(f"{k[0]:5s} n={k[1]:3d} {k[2]:8s} median {statistics.median(v):7.2f} ms  [{min(v):.2f}-{max(v):.2f}]")
