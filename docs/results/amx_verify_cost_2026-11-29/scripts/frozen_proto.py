"""Prototype: the target's layer math compiled per layer pair with its packed weights
frozen (constants), so inductor's max-autotune can pick its CPP WoQ int4 GEMM templates
(AMX from 8 rows).  Times a target forward at B=1, c=200, n in NS against eager."""
import sys, time, statistics, os
sys.path.insert(0, '/work/main')
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/s27/inductor_cache")
import torch
torch.set_num_threads(2)
import torch._dynamo
torch._dynamo.config.cache_size_limit = 256
torch._dynamo.config.accumulated_cache_size_limit = 4096
from torch import nn
from autotune.models import load_model_pair
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from sglang_cast.models import compiled as C
fmt = sys.argv[1]
NS = [int(x) for x in sys.argv[2].split(',')]
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
target = pair.target
from sglang_cast.models.weights import PackedLinear
def as_buffers(model):
    """Plain tensor attributes of packed linears -> registered buffers (freezing folds only those)."""
    count = 0
    for mod in model.modules():
        if isinstance(mod, PackedLinear):
            for name, value in list(vars(mod).items()):
                if isinstance(value, torch.Tensor):
                    delattr(mod, name); mod.register_buffer(name, value); count += 1
    return count
print("buffers", as_buffers(target), flush=True)
import torch._inductor.config as icfg
icfg.freezing = True
icfg.cpp_wrapper = os.environ.get("CPPW") == "1"
icfg.max_autotune = True
icfg.max_autotune_gemm_backends = "CPP,ATEN"
OPTS = {}

class Enter(nn.Module):
    def __init__(self, layer): super().__init__(); self.layer = layer
    def forward(self, h, cos, sin): return C._enter(self.layer, h, cos, sin)
class Between(nn.Module):
    def __init__(self, a, b): super().__init__(); self.a, self.b = a, b
    def forward(self, h, att, cos, sin): return C._between(self.a, self.b, h, att, cos, sin)
class Leave(nn.Module):
    def __init__(self, layer, norm): super().__init__(); self.layer, self.norm = layer, norm
    def forward(self, h, att): return C._leave(self.layer, self.norm, h, att)

class Frozen:
    def __init__(self, model):
        L = model.layers
        comp = lambda m: torch.compile(m.eval(), dynamic=False, options=OPTS)
        self.enter = comp(Enter(L[0]))
        self.between = [comp(Between(L[i], L[i + 1])) for i in range(len(L) - 1)]
        self.leave = comp(Leave(L[-1], model.norm))
    def run_layers(self, model, h, cos, sin, batch, capture):
        features = {0: h} if 0 in capture else {}
        q, k, v = self.enter(h, cos, sin)
        for i, between in enumerate(self.between):
            attended = batch.attend(i, q, k, v)
            h, q, k, v = between(h, attended, cos, sin)
            if i + 1 in capture:
                features[i + 1] = h
        attended = batch.attend(len(model.layers) - 1, q, k, v)
        return self.leave(h, attended), features

eng = pair.engine(make_policy('vanilla', load_settings('profiles/cpu.yaml', 'cpu').profile.settings), 1, 512)
r = eng.runner
timer = ForwardTimer(None, r.target_cache, target.config.vocab_size)
timer.forward = lambda tokens, positions, cache_, slots, mask: r.target_forward(tokens, positions, slots, mask)
frozen = Frozen(target)
t0 = time.perf_counter()
with torch.inference_mode():
    for n in NS:
        target.compiled = frozen
        timer.time(1, 200, n, warmup=1, repeats=1)
print(f"compile {time.perf_counter() - t0:.0f} s", flush=True)
samples = {(m, n): [] for m in ('eager', 'frozen') for n in NS}
import contextlib
stance = torch.compiler.set_stance(skip_guard_eval_unsafe=True) if os.environ.get("SKIPG") == "1" else contextlib.nullcontext()
stance.__enter__()
for rnd in range(8):
    for n in NS:
        for mode in ('eager', 'frozen'):
            target.compiled = frozen if mode == 'frozen' else None
            samples[(mode, n)].append(timer.time(1, 200, n, warmup=1, repeats=5).median_ms)
for n in NS:
    e, f = statistics.median(samples[('eager', n)]), statistics.median(samples[('frozen', n)])
    print(f"n={n}: eager {e:.2f} ms  frozen-compiled {f:.2f} ms  ({f / e:.2f}x)", flush=True)
# Same tokens?  greedy logits argmax agreement on one forward
