import sys, statistics
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
import sglang_cast.models.attention as A
fmt = sys.argv[1]; ctx = int(sys.argv[2])
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
eng = pair.engine(make_policy('vanilla', load_settings('profiles/cpu.yaml','cpu').profile.settings), 1, 1024)
r = eng.runner
timer = ForwardTimer(None, r.target_cache, pair.target.config.vocab_size)
timer.forward = lambda tokens, positions, cache_, slots, mask: r.target_forward(tokens, positions, slots, mask)
ns = (2, 3, 4, 7)
S = {(k, n): [] for k in ('matmul', 'sdpa') for n in ns}
for rnd in range(10):
    for n in ns:
        for k, small in (('matmul', 64), ('sdpa', 0)):
            A.SMALL_QUERY_ROWS = small
            S[(k, n)].append(timer.time(1, ctx, n, warmup=1, repeats=5).median_ms)
for n in ns:
    a, b = S[('matmul', n)], S[('sdpa', n)]
    ratios = [y / x for x, y in zip(a, b)]
    print(f"ctx {ctx} n={n}: matmul {statistics.median(a):.2f}  sdpa {statistics.median(b):.2f}  per-round sdpa/matmul {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
