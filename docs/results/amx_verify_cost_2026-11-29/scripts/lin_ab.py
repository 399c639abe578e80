import sys, statistics, time
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(int(sys.argv[2]))
from autotune.models import load_model_pair
from sglang_cast.models.llama import linear
fmt = sys.argv[1]
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
m = pair.target
mods = [(name, mod) for name, mod in m.named_modules() if type(mod).__name__ == 'DenseFromRows' or (type(mod).__name__ in ('Int4Linear','Int8Linear') and 'lm_head' in name)]
print(len(mods), {type(x).__name__ for _, x in mods})
layers = [mod for name, mod in mods if 'lm_head' not in name]
heads = [mod for name, mod in mods if 'lm_head' in name]
def run(M, mods):
    xs = [torch.randn(M, (mod.packed.in_features if hasattr(mod,'packed') else mod.in_features)) for mod in mods]
    def f():
        for mod, x in zip(mods, xs): linear(mod, x)
    return f
for rnd in range(2):
    for M in (1, 2, 3, 4, 7):
        for label, group in (('layers', layers), ('lm_head', heads)):
            f = run(M, group); f()
            ts = []
            for _ in range(7):
                t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1e3)
            print(rnd, M, label, '%.2f' % statistics.median(ts))
