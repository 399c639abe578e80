"""ms per pass over the model's 120 layer linears: int4 packed kernel vs dense fp32 / bf16 of the same (dequantized) weights, by rows M."""
import sys, time, torch
sys.path.insert(0, ".")
from sglang_cast.models.weights import Int4Linear, int4_quantize
torch.set_num_threads(2); torch.manual_seed(0)
shapes = [(576, 1536), (1536, 576), (576, 576), (576, 192)]
lins = []
for _ in range(30):
    for i, o in shapes:
        g = int4_quantize(torch.randn(o, i) * 0.02)
        lins.append((i, Int4Linear(g), g.dequantize().contiguous()))
def run(M, kind, reps):
    xs = {i: torch.randn(M, i) for i, _ in shapes}
    f = {"int4": lambda i, l, w: l(xs[i]), "fp32": lambda i, l, w: torch.nn.functional.linear(xs[i], w)}[kind]
    for i, l, w in lins[:8]: f(i, l, w)
    t = time.perf_counter()
    for _ in range(reps):
        for i, l, w in lins: f(i, l, w)
    return (time.perf_counter() - t) / reps * 1e3
for M in (1, 2, 4, 8, 16, 32, 64, 128):
    reps = 10 if M <= 16 else 3
    r = {k: min(run(M, k, reps) for _ in range(2)) for k in ("int4", "fp32")}
    print(f"M={M:4d}  int4 {r['int4']:7.1f} ms  fp32 {r['fp32']:7.1f} ms  fp32/int4 {r['fp32']/r['int4']:.2f}", flush=True)
