"""Each bucket of a profile replayed on the first and second half of its stored traces
(in recording order, so the halves are different prompts): CAST/plain per half.  Would
a split-half check have flagged the buckets whose live gate or benchmark disagreed?

    .venv/bin/python docs/results/b1_length_2026-11-30/replay_halves.py [profile.yaml]
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
from autotune.models import load_model_pair, reference_target_id  # noqa: E402
from autotune.store import Store  # noqa: E402
from autotune.tuner import replay_settings  # noqa: E402
from sglang_cast.cast import PolicySettings  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

path = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "profiles/cpu.yaml")
settings = load_profile(path).profile.settings
pair = load_model_pair(None, None, "cpu", "float32")
store = Store(str(Path.home() / ".cache/sglang_cast/autotune.db"))
stored = store.traces(reference_target_id(pair.target_id), pair.draft_id)
low = 0
for bucket in settings.buckets:
    traces = [s.trace for s in stored if low < s.batch_size <= bucket.max_batch_size]
    low = bucket.max_batch_size
    only = PolicySettings(buckets=(bucket,), costs=settings.costs)

    def ratio(part):
        return replay_settings(part, only, "cast").tokens_per_s / replay_settings(part, only, "vanilla").tokens_per_s

    half = len(traces) // 2
    print(f"B <= {bucket.max_batch_size:2d} ({'speculates' if bucket.speculate else 'plain'}; k{bucket.shape.top_k} "
          f"d{bucket.shape.max_depth} m{bucket.shape.num_verify_tokens} branch {bucket.lookup_depth}): "
          f"{len(traces)} traces, all {ratio(traces):.3f}x, halves {ratio(traces[:half]):.3f}x / "
          f"{ratio(traces[half:]):.3f}x")
