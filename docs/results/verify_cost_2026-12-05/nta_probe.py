"""Does streaming a forward's weights with non-temporal prefetches leave the host's working set in
cache?  A forward's worth of linears (30 layers x 4 int4 + the int8 head) under the shipped kernel
(prefetch T0) and a copy built with _MM_HINT_NTA, each followed by a fixed host workload (Python
objects and small NumPy ops over ~1.5 MB, timed), interleaved in one process."""
import sys, tempfile, time, statistics
from pathlib import Path
import numpy as np
import torch
from torch.utils import cpp_extension
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
torch.set_num_threads(2)
from sglang_cast.models.vnni_dot import KERNEL
from forward_weights import SHAPES, forward_weights
KERNEL.load()
ops = {"T0": torch.ops.sglang_cast_vnni}
src = (Path(__file__).resolve().parents[3] / "sglang_cast/models/csrc/vnni_dot.cpp").read_text()
assert src.count("_MM_HINT_T0") == 1
build = Path(tempfile.mkdtemp())
(build / "nta.cpp").write_text(src.replace("_MM_HINT_T0", "_MM_HINT_NTA").replace("sglang_cast_vnni", "kx_nta"))
cpp_extension.load(name="kx_nta", sources=[str(build / "nta.cpp")], extra_cflags=["-O3", *KERNEL.compile_flags],
                   extra_ldflags=["-fopenmp"], build_directory=str(build), is_python_module=False)
ops["NTA"] = torch.ops.kx_nta
g = torch.Generator().manual_seed(0)
shapes = SHAPES
layers, head = forward_weights(g)
rows = int(sys.argv[1]); rounds = int(sys.argv[2])
xs = {k: torch.randn(rows, k, generator=g) for k in (576, 1536)}
def forward(op):
    for ws in layers:
        for (n, k), w in zip(shapes, ws):
            op.int4_mm(xs[k], w)
    op.int8_mm(xs[576], head.blocks, head.scales)
objs = [{"id": i, "value": float(i), "name": str(i)} for i in range(8000)]  # ~1.5 MB of Python objects
arrays = [np.random.rand(64, 8) for _ in range(200)]
def host():
    total = 0.0
    for o in objs:
        total += o["value"]
    for a in arrays:
        total += float(a.argsort(axis=1, kind="stable")[0, 0])
    return total
t = {(v, w): [] for v in ops for w in ("forward", "host")}
for r in range(rounds):
    for v, op in (list(ops.items()) if r % 2 == 0 else list(ops.items())[::-1]):
        s = time.perf_counter(); forward(op); m = time.perf_counter(); host(); e = time.perf_counter()
        t[(v, "forward")].append((m - s) * 1e3); t[(v, "host")].append((e - m) * 1e3)
hot = []
for _ in range(rounds):
    s = time.perf_counter(); host(); hot.append((time.perf_counter() - s) * 1e3)
print(f"M={rows}, {rounds} rounds, ms medians [p25-p75]; host workload alone, warm: {statistics.median(hot):.3f}")
for v in ops:
    for w in ("forward", "host"):
        q = statistics.quantiles(t[(v, w)], n=4)
        print(f"  {v:4s} {w:8s} {statistics.median(t[(v, w)]):7.3f} [{q[0]:.3f}-{q[2]:.3f}]")
