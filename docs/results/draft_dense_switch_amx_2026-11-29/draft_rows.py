"""Draft forward per format (int8, bf16) by rows: B x n, warm, interleaved rounds; the crossover of the int8 kernel with a dense bf16 GEMM."""
import sys, time, statistics
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from sglang_cast.engine.table_calibration import role_timer
from sglang_cast.models.attention import causal_tree_mask
torch.set_num_threads(2)
fmts = ['int8', 'bf16']
timers = {}
for f in fmts:
    pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=f"int4/int8:dense16:bf16+{f}")
    timers[f] = role_timer(pair.target, pair.draft, 'draft', 16, 400, None)
def call(timer, b, n, ctx):
    cache = timer.cache; slots = torch.arange(b); cache.lens[slots] = ctx
    tokens = torch.randint(0, 1000, (b, n)); positions = ctx + torch.arange(n).expand(b, n)
    mask = causal_tree_mask(b, n, 'cpu'); f = torch.randn(b, n, 1728)
    return timer.call(tokens, f, positions, slots, mask)
def timed(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
res = {}
pts = [(1, n) for n in (4, 8, 12, 16, 24, 32, 64)] + [(b, 1) for b in (8, 16)] + [(4, 4), (16, 4)]
with torch.inference_mode():
    calls = {(f, b, n): call(timers[f], b, n, 128) for f in fmts for b, n in pts}
    for c in calls.values(): c()
    for r in range(7):
        for k, c in calls.items():
            res.setdefault(k, []).append(timed(c))
for b, n in pts:
    a, z = statistics.median(res[('int8', b, n)]), statistics.median(res[('bf16', b, n)])
    print(f"B={b:2d} n={n:3d} rows {b*n:4d}: int8 {a:6.2f} ms  bf16 {z:6.2f} ms  bf16/int8 {z/a:.2f}")
