"""A forward's worth of int4 linears (30 layers x 4, distinct weights: 53 MB) and the int8 LM
head (28 MB) run back to back, as a target forward streams them, against the same calls hot."""
import sys, time, statistics
import torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
from sglang_cast.models.vnni_dot import KERNEL
from forward_weights import SHAPES, forward_weights
KERNEL.load()
op = torch.ops.sglang_cast_vnni
rows = [int(m) for m in sys.argv[1].split(",")]
rounds = int(sys.argv[2])
g = torch.Generator().manual_seed(0)
shapes = SHAPES
layers, head = forward_weights(g)
xs = {(m, k): torch.randn(m, k, generator=g) for m in rows for k in (576, 1536)}
def forward(m):
    for ws in layers:
        for (n, k), w in zip(shapes, ws):
            op.int4_mm(xs[(m, k)], w)
    op.int8_mm(xs[(m, 576)], head.blocks, head.scales)
def hot(m):  # layer 0's weights 30 times, the head's first 1/8 of blocks 8 times
    for _ in range(30):
        for (n, k), w in zip(shapes, layers[0]):
            op.int4_mm(xs[(m, k)], w)
    part = head.blocks[: head.blocks.shape[0] // 8]
    for _ in range(8):
        op.int8_mm(xs[(m, 576)], part, head.scales[: part.shape[0] * 64])
t = {(w, m): [] for w in ("stream", "hot") for m in rows}
for r in range(rounds):
    for m in rows:
        for what, fn in (("stream", forward), ("hot", hot)):
            fn(m)
            s = time.perf_counter(); fn(m); fn(m); fn(m)
            t[(what, m)].append((time.perf_counter() - s) / 3 * 1e3)
print("ms per forward's linears (median of rounds); stream = 30 distinct layers + LM head, hot = layer 0 x 30 + 1/8 head x 8")
print("M       " + "".join(f"{m:>8}" for m in rows))
for what in ("stream", "hot"):
    print(what.ljust(8) + "".join(f"{statistics.median(t[(what, m)]):8.2f}" for m in rows))
print("ratio   " + "".join(f"{statistics.median(t[('stream', m)]) / statistics.median(t[('hot', m)]):8.2f}" for m in rows))
