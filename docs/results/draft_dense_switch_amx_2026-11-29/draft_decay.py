import sys, time, statistics
exec(open('docs/results/draft_dense_switch_amx_2026-11-29/draft_after_target.py').read().split("def timed")[0])
def timed(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
K = 30
seq = [[] for _ in range(K)]
with torch.inference_mode():
    for _ in range(5): T(); D()
    for r in range(12):
        T()
        for i in range(K): seq[i].append(timed(D))
print(" ".join(f"{statistics.median(s):.2f}" for s in seq))
# big memory sweep instead of T
buf = torch.empty(200 * 2**20 // 4)
seq = [[] for _ in range(K)]
with torch.inference_mode():
    for r in range(12):
        buf.add_(1.0)
        for i in range(K): seq[i].append(timed(D))
print("after 200MB sweep:", " ".join(f"{statistics.median(s):.2f}" for s in seq))
