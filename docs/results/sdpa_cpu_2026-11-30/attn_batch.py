"""Masked grouped attention alone, warm, at B = 1, 4 and 16 (half the rows with their last 40
keys masked): `attention.three_kernel_attention` (the CPU's rule before 2026-11-30 below 64
grouped rows) against the fused SDPA kernel.  Medians of 3 runs of 150 calls, µs.

    .venv/bin/python docs/results/sdpa_cpu_2026-11-30/attn_batch.py
"""
import time, statistics, torch, torch.nn.functional as F, sys
torch.set_num_threads(2)
sys.path.insert(0, '/work/main')
import sglang_cast.models.attention as A
cap, D = 2048, 64
cacheK = torch.randn(30, 16, 3, cap, D); cacheV = torch.randn(30, 16, 3, cap, D)
def run(B, n, L, fused, reps=150):
    q = torch.randn(B, 9, n, D)
    bias = torch.zeros(B, 1, 3 * n, L)
    bias[::2, :, :, L - 40:] = float('-inf')
    ts = []
    for r in range(reps):
        layer = r % 30
        k, v = cacheK[layer, :B, :, :L], cacheV[layer, :B, :, :L]
        g = q.reshape(B, 3, 3 * n, D)
        t = time.perf_counter()
        if fused: F.scaled_dot_product_attention(g, k, v, attn_mask=bias)
        else: A.three_kernel_attention(g, k, v, bias)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
for B in (1, 4, 16):
    for n in (1, 2, 4):
        for L in (150, 400):
            a = [run(B, n, L, False) for _ in range(3)]; b = [run(B, n, L, True) for _ in range(3)]
            print(f"B={B:2d} n={n} L={L}: kernels3 {statistics.median(a):7.1f}  fused {statistics.median(b):7.1f} us  ratio {statistics.median(b)/statistics.median(a):.2f}", flush=True)
