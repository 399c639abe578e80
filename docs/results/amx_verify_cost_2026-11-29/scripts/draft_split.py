"""Per-call timers on the runner's draft-stage pieces at B=1 (cpu.yaml, its format)."""
import sys, time, statistics, collections
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from tools.benchkit.inputs import load_settings
import sglang_cast.engine.runner as R
import sglang_cast.cast.expand as X
loaded = load_settings('profiles/cpu.yaml', 'cpu').profile
fmt = sys.argv[1] if len(sys.argv) > 1 else loaded.weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
settings = loaded.settings
texts = [pair.format_prompt(t) for t in load_prompts(None).texts[:6]]
engine = pair.engine(make_policy('cast', settings), 1, 600)
runner = engine.runner
T = collections.defaultdict(list)
def wrap(obj, name, key):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[key].append((time.perf_counter() - t) * 1e3); return r
    setattr(obj, name, g)
wrap(runner, 'draft_forward', 'draft_forward')
wrap(runner, '_draft_catch_up', 'catch_up(total)')
wrap(runner, '_commit_draft', 'commit_draft')
wrap(runner, 'feed_backlog', 'feed_backlog')
wrap(runner, 'target_forward', 'target_forward')
wrap(runner, 'verify', 'verify')
wrap(runner, '_commit_target', 'commit_target')
wrap(runner, 'verify_inputs', 'verify_inputs')
wrap(runner.draft_cache, 'commit_lists', 'draft_cache.commit_lists')
orig_grow = R.grow_tree
def grow(*a, **k):
    t = time.perf_counter(); r = orig_grow(*a, **k); T['grow_tree'].append((time.perf_counter() - t) * 1e3); return r
R.grow_tree = grow
params = SamplingParams(max_new_tokens=48)
engine.generate(texts[:2], params)
T.clear()
recs = []
engine.generate(texts, params, on_step=lambda s: recs.append(s))
from sglang_cast.engine import StepLog
n = None
for k, v in sorted(T.items(), key=lambda kv: -sum(kv[1])):
    print(f"{k:28s} calls {len(v):4d} median {statistics.median(v):7.3f} ms  total {sum(v):8.1f}")
