"""Is trace replay faithful?  EAGLE-2 with the very tree the traces recorded (collect's
full shape), live on the 16 tuning prompts x 48 tokens they were recorded on, against its
replay on the stored B = 1 traces; then CAST (profiles/cpu.yaml's B <= 1 bucket) the same
way.  Equal EAGLE-2 numbers mean replay reproduces the recording; CAST's difference is then
its own iterations starting elsewhere than the recorded ones (and its FIFOs' history).

    .venv/bin/python docs/results/b1_length_2026-11-30/replay_fidelity.py
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import torch  # noqa: E402

from autotune.collect import full_shape  # noqa: E402
from autotune.models import load_model_pair, reference_target_id  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from autotune.store import Store  # noqa: E402
from autotune.tuner import replay_settings  # noqa: E402
from sglang_cast.cast import BucketSettings, PolicySettings, SamplingParams, make_policy  # noqa: E402
from sglang_cast.engine.engine import StepLog  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

torch.set_num_threads(2)
settings = load_profile(str(ROOT / "profiles/cpu.yaml")).profile.settings
pair = load_model_pair(None, None, "cpu", "float32")
store = Store(str(Path.home() / ".cache/sglang_cast/autotune.db"))
b1 = [s.trace for s in store.traces(reference_target_id(pair.target_id), pair.draft_id) if s.batch_size == 1]
shape = full_shape(b1[0].top_k, b1[0].draft_depth)
lookup = b1[0].lookup_depth
cases = {
    "eagle2": PolicySettings(buckets=(BucketSettings(1, shape, lookup_depth=lookup),), costs=settings.costs),
    "cast": PolicySettings(buckets=(settings.buckets[0],), costs=settings.costs),
}
prompts = [pair.format_prompt(t) for t in load_prompts().texts[:16]]
print(f"{len(b1)} stored B = 1 traces, recorded shape {shape}, branch {lookup}")
for name, case in cases.items():
    replayed = replay_settings(b1, case, name)
    engine = pair.engine(make_policy(name, case), 1, 1024)
    log = StepLog()
    for p in prompts:
        engine.generate([p], SamplingParams(max_new_tokens=48), on_step=log)
    live = sum(r.accepted[0] + 1 for r in log.records) / len(log.records)
    print(f"{name}: replay tau {replayed.tokens / len(replayed.outcomes):.3f} over {len(replayed.outcomes)} "
          f"iterations, live tau {live:.3f} over {len(log.records)}")
