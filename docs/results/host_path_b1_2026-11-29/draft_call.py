"""One draft forward of a real B = 1 CAST decode, captured and replayed: wall µs per
call (median of repeats) and, with --cprofile, the Python functions it spends them in.
Usage: draft_call.py PROFILE DATASET TOKENS [--cprofile]"""
import cProfile, pstats, statistics, sys, time
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine.format_choice import choose_weight_format
from sglang_cast.engine.runner import SpeculativeRunner
from tools.benchkit.inputs import load_settings

profile_path, dataset, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(2)
loaded = load_settings(profile_path, 'cpu').profile
wf = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=wf)
texts = [pair.format_prompt(t) for t in load_prompts(dataset).texts[:2]]
ctx = max(len(pair.tokenizer.encode(t)) for t in texts) + 40
engine = pair.engine(make_policy('cast', loaded.settings), 1, ctx)
captured = []
orig = SpeculativeRunner.draft_forward
def capture(self, t, *a, **k):
    if t.shape[1] == tokens and not captured:
        captured.append((self, t, a, k))
    return orig(self, t, *a, **k)
SpeculativeRunner.draft_forward = capture
engine.generate(texts, SamplingParams(max_new_tokens=32))
SpeculativeRunner.draft_forward = orig
self, t, a, k = captured[0]
with torch.inference_mode():
    for _ in range(20):
        orig(self, t, *a, **k)
    walls = []
    for _ in range(300):
        s = time.perf_counter(); orig(self, t, *a, **k); walls.append((time.perf_counter() - s) * 1e6)
    print(f"draft forward [1, {tokens}] ({wf}): median {statistics.median(walls):.0f} us, p10 {sorted(walls)[30]:.0f}, p90 {sorted(walls)[270]:.0f}")
    if '--cprofile' in sys.argv:
        prof = cProfile.Profile(); prof.enable()
        for _ in range(300):
            orig(self, t, *a, **k)
        prof.disable()
        pstats.Stats(prof).sort_stats('tottime').print_stats(40)
