"""Variants of csrc/vnni_dot.cpp built under their own namespaces, timed round-robin on the
model's linear shapes; each variant's outputs compared bit for bit with the shipped kernel's."""
import sys, tempfile, time, statistics
from pathlib import Path
import torch
from torch.utils import cpp_extension
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
torch.set_num_threads(2)
from sglang_cast.models.vnni_dot import VnniInt4, VnniInt8, KERNEL
KERNEL.load()
variants = sys.argv[1].split(",")  # paths of variant .cpp files (named by their stem)
rows = [int(m) for m in sys.argv[2].split(",")]
rounds = int(sys.argv[3])
ops = {"base": torch.ops.sglang_cast_vnni}
builds = Path(tempfile.mkdtemp())
for path in variants:
    v = Path(path).stem
    src = Path(path).read_text().replace("sglang_cast_vnni", f"kx_{v}")
    (builds / v).mkdir()
    (builds / v / f"{v}_src.cpp").write_text(src)
    cpp_extension.load(name=f"kx_{v}", sources=[str(builds / v / f"{v}_src.cpp")], extra_cflags=["-O3", *KERNEL.compile_flags],
                       extra_ldflags=["-fopenmp"], build_directory=str(builds / v), is_python_module=False)
    ops[v] = getattr(torch.ops, f"kx_{v}")
g = torch.Generator().manual_seed(0)
shapes = {"qkv": (960, 576), "gate_up": (3072, 576), "down": (576, 1536), "o": (576, 576)}
w4 = {}
for name, (n, k) in shapes.items():
    codes = torch.randint(0, 16, (n, k), generator=g)
    scales = torch.rand(n, k // 32, generator=g) * 0.01 + 0.001
    zeros = torch.randn(n, k // 32, generator=g) * 0.01
    w4[name] = VnniInt4.pack(codes, scales, zeros)
head = VnniInt8.pack(torch.randint(-127, 128, (49152, 576), generator=g, dtype=torch.int32).to(torch.int8), torch.rand(49152) * 0.01)
xs = {(m, k): torch.randn(m, k, generator=g) for m in rows for k in (576, 1536)}
def layer(op, m):  # the four int4 linears of one layer, x fp32
    for name, (n, k) in shapes.items():
        op.int4_mm(xs[(m, k)], w4[name].blocks)
def lm(op, m):
    op.int8_mm(xs[(m, 576)], head.blocks, head.scales)
# exactness
for v, op in ops.items():
    for m in rows:
        for name, (n, k) in shapes.items():
            a = ops["base"].int4_mm(xs[(m, k)], w4[name].blocks); b = op.int4_mm(xs[(m, k)], w4[name].blocks)
            assert torch.equal(a, b), (v, m, name)
        assert torch.equal(ops["base"].int8_mm(xs[(m, 576)], head.blocks, head.scales), op.int8_mm(xs[(m, 576)], head.blocks, head.scales)), (v, m)
print("bit-identical to base:", list(ops), flush=True)
times = {(v, m, what): [] for v in ops for m in rows for what in ("layer", "lm")}
for r in range(rounds):
    for m in rows:
        for v, op in (list(ops.items()) if r % 2 == 0 else list(ops.items())[::-1]):
            for what, fn, reps in (("layer", layer, 30), ("lm", lm, 3)):
                fn(op, m)
                t = time.perf_counter()
                for _ in range(reps): fn(op, m)
                times[(v, m, what)].append((time.perf_counter() - t) / reps * 1e6)
print(f"us per call, median of {rounds} rounds (layer = the 4 int4 linears of one decoder layer; lm = int8 LM head)")
for what in ("layer", "lm"):
    print(what.ljust(6) + "".join(f"{'M=' + str(m):>10}" for m in rows))
    for v in ops:
        med = [statistics.median(times[(v, m, what)]) for m in rows]
        base = [statistics.median(times[("base", m, what)]) for m in rows]
        print(v.ljust(6) + "".join(f"{x:10.1f}" for x in med) + "   ratio " + " ".join(f"{x/b:.2f}" for x, b in zip(med, base)))
