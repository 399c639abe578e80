"""Eager vs `freeze_large_rows` on the real model (needs branch wip/frozen-large-rows)."""
import sys, time, statistics
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from sglang_cast.models.frozen import freeze_large_rows
fmt = sys.argv[1]; NS = [int(x) for x in sys.argv[2].split(',')]
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
target = pair.target
eng = pair.engine(make_policy('vanilla', load_settings('profiles/cpu.yaml', 'cpu').profile.settings), 1, 512)
r = eng.runner
timer = ForwardTimer(None, r.target_cache, target.config.vocab_size)
timer.forward = lambda tokens, positions, cache_, slots, mask: r.target_forward(tokens, positions, slots, mask)
t0 = time.perf_counter(); frozen = freeze_large_rows(target); print(f"freeze {time.perf_counter()-t0:.0f} s", flush=True)
S = {(m, n): [] for m in ('eager', 'frozen') for n in NS}
for rnd in range(6):
    for n in NS:
        for mode in ('eager', 'frozen'):
            target.compiled = frozen if mode == 'frozen' else None
            S[(mode, n)].append(timer.time(1, 200, n, warmup=1, repeats=5).median_ms)
for n in NS:
    e, f = statistics.median(S[('eager', n)]), statistics.median(S[('frozen', n)])
    print(f"n={n}: eager {e:.2f} frozen {f:.2f} ({f/e:.2f}x)", flush=True)
# numerics at n=16
with torch.inference_mode():
    toks = torch.randint(0, 1000, (1, 16)); pos = 200 + torch.arange(16)[None]
    from sglang_cast.models import causal_tree_mask
    r.target_cache.lens[0] = 200
    outs = {}
    for mode in ('eager', 'frozen'):
        target.compiled = frozen if mode == 'frozen' else None
        outs[mode] = r.target_forward(toks, pos, torch.tensor([0]), causal_tree_mask(1, 16, 'cpu'))[0]
    d = (outs['eager'] - outs['frozen']).abs().max().item()
    agree = (outs['eager'].argmax(-1) == outs['frozen'].argmax(-1)).float().mean().item()
    print(f"max |dlogit| {d:.3f}, top-1 agreement {agree:.3f}")
