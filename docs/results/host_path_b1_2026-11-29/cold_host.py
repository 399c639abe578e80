"""How long small host ops take right after the cache is swept: torch.zeros(1), a
[1, 49152] greedy argmax (`cast.greedy_tokens`) and a 2-row verify walk, each after reading
a buffer of S MB (a model forward streams its weights the same way), or after an idle
20 ms sleep; medians of 150.  Usage: cold_host.py THREADS"""
import statistics, sys, time
sys.path.insert(0, '/work/main')
import torch
from sglang_cast.cast.sampling import greedy_tokens
torch.set_num_threads(int(sys.argv[1]))
logits = torch.randn(1, 1, 49152)
def median_us(fn, before):
    ts = []
    for _ in range(150):
        before(); t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)
ops = {'zeros(1)': lambda: torch.zeros(1), 'greedy [1, 49152]': lambda: greedy_tokens(logits).tolist(),
       'python dict walk': lambda: sum(len(k) for k in list(sys.modules)[:300])}
conditions = [('warm', lambda: None)]
for mb in (1, 4, 16, 64, 256):
    buf = torch.ones(mb * 1024 * 1024 // 4)
    conditions.append((f'after {mb} MB read', lambda b=buf: b.sum()))
conditions.append(('after 20 ms sleep', lambda: time.sleep(0.02)))
print(f"threads {sys.argv[1]}; median us")
print(f"{'':22s}" + ''.join(f"{name:>20s}" for name in ops))
for cname, before in conditions:
    print(f"{cname:22s}" + ''.join(f"{median_us(fn, before):20.1f}" for fn in ops.values()))
