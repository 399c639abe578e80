# Micro-benchmark: one commit's moved cache entries (B = 16 slots, 30 layers, 3 KV heads, 64 dims, fp32),
# gathered (advanced indexing, the engine's way) against one slice copy per entry. Usage: python commit_moves_micro.py THREADS
import time, torch, statistics, sys
torch.set_num_threads(int(sys.argv[1]))
B=16
k = torch.zeros(30, B, 3, 2200, 64); v = torch.zeros_like(k)
def batched(moves):
    rows, src, dst = (torch.tensor(t) for t in zip(*moves))
    k[:, rows, :, dst] = k[:, rows, :, src]; v[:, rows, :, dst] = v[:, rows, :, src]
def per_entry(moves):
    for r, s, d in moves:
        k[:, r, :, d].copy_(k[:, r, :, s]); v[:, r, :, d].copy_(v[:, r, :, s])
for n in (1, 2, 4, 8, 16, 32):
    moves = [(i % B, 510 + i // B * 3, 500 + i // B) for i in range(n)]
    res={}
    for r in range(5):
        for f in (batched, per_entry):
            t=time.perf_counter()
            for _ in range(200): f(moves)
            res.setdefault(f.__name__,[]).append((time.perf_counter()-t)/200*1e6)
    print(n, {k_: round(statistics.median(v_),1) for k_,v_ in res.items()})
