"""The model's int4 linears (30 layers x 7 shapes, random weights: 106 M, streamed from
memory as in a forward) by torch's kernel and by the int4amx tile kernel, ms per pass."""
import sys, time, statistics, torch; sys.path.insert(0,'.')
torch.set_num_threads(2)
from sglang_cast.models.weights import int4_quantize, Int4Linear, Int4AmxLinear
from sglang_cast.models import amx_tiles
shapes = [(576,576),(576,192),(576,192),(576,576),(576,1536),(576,1536),(1536,576)]
layers = []
for l in range(30):
    for K, N in shapes:
        g = int4_quantize(torch.randn(N, K) * 0.02)
        layers.append(Int4AmxLinear(g))
def bench(fn, reps=7):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
for M in (1, 4, 5, 8, 16):
    xs = [torch.randn(M, lin.in_features).bfloat16() for lin in layers]
    torch_k = lambda: [Int4Linear._matmul(lin, x) for lin, x in zip(layers, xs)]
    tiles = lambda: [lin.tiled.matmul(x) for lin, x in zip(layers, xs)]
    a, b = [], []
    for _ in range(3): a.append(bench(torch_k)); b.append(bench(tiles))
    print(f"M={M:2d} torch {statistics.median(a):6.2f} ms  tiles {statistics.median(b):6.2f} ms", flush=True)
