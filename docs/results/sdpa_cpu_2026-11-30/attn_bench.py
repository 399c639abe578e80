"""Masked grouped attention alone, warm, at B = 1 (9 query heads over 3 K/V heads, head dim 64, keys
read through a window of a 2,048-slot cache as the engine does): the three plain kernels (`cur`,
the CPU's rule before 2026-11-30) against the fused SDPA kernel with the additive mask, and two
other forms.  Medians in µs.  `ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2` forces
torch's and MKL's AVX2 kernels on an AVX-512 CPU.

    .venv/bin/python docs/results/sdpa_cpu_2026-11-30/attn_bench.py
"""
import time, statistics, torch, torch.nn.functional as F
torch.set_num_threads(2)
cap, L, D = 2048, 202, 64
cacheK = torch.randn(30, 4, 3, cap, D); cacheV = torch.randn(30, 4, 3, cap, D)
def cur(q, k, v, bias):
    b, h, n, d = q.shape
    g = q.reshape(b, 3, (h // 3) * n, d)
    s = torch.matmul(g, k.transpose(-1, -2)).mul_(d ** -0.5).add_(bias)
    return torch.matmul(torch.softmax(s, -1), v).reshape(b, h, n, d)
def sdpa_mask(q, k, v, bias):
    b, h, n, d = q.shape
    g = q.reshape(b, 3, (h // 3) * n, d)
    return F.scaled_dot_product_attention(g, k, v, attn_mask=bias).reshape(b, h, n, d)
def sdpa_nomask(q, k, v, bias):
    b, h, n, d = q.shape
    g = q.reshape(b, 3, (h // 3) * n, d)
    return F.scaled_dot_product_attention(g, k, v).reshape(b, h, n, d)
def bmm3(q, k, v, bias):
    b, h, n, d = q.shape
    g = q.reshape(3, (h // 3) * n, d)
    kk, vv = k[0], v[0]
    s = torch.baddbmm(bias[0].expand(3, -1, -1), g, kk.transpose(-1, -2), alpha=d ** -0.5)
    return torch.bmm(torch.softmax(s, -1), vv).view(b, h, n, d)
def run(fn, n, reps=300):
    q = torch.randn(1, 9, n, D).transpose(1, 2).contiguous().transpose(1, 2)  # like qk[:, :heads] view
    bias = torch.zeros(1, 1, 3 * n, L)
    ts = []
    for r in range(reps):
        layer = r % 30
        k, v = cacheK[layer, 0:1, :, :L], cacheV[layer, 0:1, :, :L]
        t = time.perf_counter(); fn(q, k, v, bias); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
for n in (1, 2, 4, 8):
    print(n, {f.__name__: round(run(f, n), 1) for f in (cur, sdpa_mask, sdpa_nomask, bmm3)})
print("interleaved, 5 rounds, L in (202, 600)")
for L_ in (202, 600):
    L = L_
    res = {}
    for rnd in range(5):
        for n in (1, 2, 4, 8, 16):
            for f in (cur, sdpa_mask):
                res.setdefault((n, f.__name__), []).append(run(f, n, 120))
    for n in (1, 2, 4, 8, 16):
        a, b = res[(n, 'cur')], res[(n, 'sdpa_mask')]
        print(L, n, f"cur {statistics.median(a):.1f} sdpa_mask {statistics.median(b):.1f} ratio {statistics.median([y/x for x,y in zip(a,b)]):.2f}")
