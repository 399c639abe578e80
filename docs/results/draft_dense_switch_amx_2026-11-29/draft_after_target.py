"""Draft forward (n = 2) right after a target forward (as in a step) against back-to-back, and after sleep / Python work."""
import sys, time, statistics
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from sglang_cast.engine.table_calibration import role_timer
from sglang_cast.models.attention import causal_tree_mask
from tools.benchkit.inputs import load_settings
from sglang_cast.engine.format_choice import choose_weight_format
torch.set_num_threads(2)
loaded = load_settings('profiles/cpu.yaml', 'cpu').profile
wf = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=wf)
def call(timer, n, feats):
    cache = timer.cache; slots = torch.arange(1); cache.lens[slots] = 128
    tokens = torch.randint(0, 1000, (1, n)); positions = 128 + torch.arange(n).expand(1, n)
    mask = causal_tree_mask(1, n, 'cpu'); f = torch.randn(1, n, 1728) if feats else None
    return timer.call(tokens, f, positions, slots, mask)
T = call(role_timer(pair.target, pair.draft, 'target', 1, 300, None), 3, False)
D = call(role_timer(pair.target, pair.draft, 'draft', 1, 300, None), 2, True)
def timed(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
res = {k: [] for k in ('D after D', 'D after T', '2nd D after T', 'D after T+1ms sleep', 'D after T+0.5ms py', 'T after T', 'T after D')}
with torch.inference_mode():
    for _ in range(5): T(); D()
    for r in range(25):
        D(); res['D after D'].append(timed(D))
        T(); res['D after T'].append(timed(D)); res['2nd D after T'].append(timed(D))
        T(); time.sleep(0.001); res['D after T+1ms sleep'].append(timed(D))
        T(); x = sum(range(25000)); res['D after T+0.5ms py'].append(timed(D))
        res['T after D'].append(timed(T)); res['T after T'].append(timed(T))
for k, v in res.items():
    v = sorted(v)
    print(f"{k:22s} median {statistics.median(v):6.2f} ms  p10 {v[len(v)//10]:6.2f} p90 {v[9*len(v)//10]:6.2f}")
