import sys, statistics, time
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
from autotune.models import load_model_pair
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
import sglang_cast.models.attention as A
fmt = sys.argv[1]
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
eng = pair.engine(make_policy('vanilla', load_settings('profiles/cpu.yaml','cpu').profile.settings), 1, 512)
r = eng.runner
timer = ForwardTimer(None, r.target_cache, pair.target.config.vocab_size)
timer.forward = lambda tokens, positions, cache_, slots, mask: r.target_forward(tokens, positions, slots, mask)
variants = {'n1': (1, 64), 'n2': (2, 64), 'n2-sdpa': (2, 0), 'n3': (3, 64)}
samples = {k: [] for k in variants}
for rnd in range(12):
    for k, (n, small) in variants.items():
        A.SMALL_QUERY_ROWS = small
        samples[k].append(timer.time(1, 200, n, warmup=1, repeats=5).median_ms)
for k, v in samples.items():
    print(k, 'median %.2f  p25 %.2f p75 %.2f' % (statistics.median(v), sorted(v)[3], sorted(v)[8]))
