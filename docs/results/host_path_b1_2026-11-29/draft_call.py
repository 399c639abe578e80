"""One draft forward of a real B = 1 CAST decode, captured and replayed: wall µs per
call (median of repeats) and, with --cprofile, the Python functions it spends them in.
Usage: draft_call.py PROFILE DATASET TOKENS [--cprofile]"""
import cProfile, pstats, statistics, sys, time
import torch
from setup_b1 import setup
from sglang_cast.engine.runner import SpeculativeRunner

profile_path, dataset, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
run = setup(profile_path, dataset, 2)
engine = run.engine('cast')
captured = []
orig = SpeculativeRunner.draft_forward
def capture(self, t, *a, **k):
    if t.shape[1] == tokens and not captured:
        captured.append((self, t, a, k))
    return orig(self, t, *a, **k)
SpeculativeRunner.draft_forward = capture
engine.generate(run.texts, run.params)
SpeculativeRunner.draft_forward = orig
self, t, a, k = captured[0]
with torch.inference_mode():
    for _ in range(20):
        orig(self, t, *a, **k)
    walls = []
    for _ in range(300):
        s = time.perf_counter(); orig(self, t, *a, **k); walls.append((time.perf_counter() - s) * 1e6)
    print(f"draft forward [1, {tokens}] ({run.weight_format}): median {statistics.median(walls):.0f} us, p10 {sorted(walls)[30]:.0f}, p90 {sorted(walls)[270]:.0f}")
    if '--cprofile' in sys.argv:
        prof = cProfile.Profile(); prof.enable()
        for _ in range(300):
            orig(self, t, *a, **k)
        prof.disable()
        pstats.Stats(prof).sort_stats('tottime').print_stats(40)
