"""The B <= 1 bucket of profiles/cpu.yaml replayed on the tune's 40-trace sample and on
every stored B = 1 trace (and on disjoint 40-trace samples of them): how much the
prediction moves with the sample it is read from.

    .venv/bin/python docs/results/b1_length_2026-11-30/replay_sample.py
"""
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
from autotune.models import load_model_pair, reference_target_id  # noqa: E402
from autotune.store import Store  # noqa: E402
from autotune.tuner import even_sample, replay_settings  # noqa: E402
from sglang_cast.cast import PolicySettings  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

profile = load_profile(str(ROOT / "profiles/cpu.yaml")).profile
settings = profile.settings
bucket = settings.buckets[0]
pair = load_model_pair(None, None, "cpu", "float32")
store = Store(str(Path.home() / ".cache/sglang_cast/autotune.db"))
stored = store.traces(reference_target_id(pair.target_id), pair.draft_id)
b1 = [s.trace for s in stored if s.batch_size == 1]
print(f"bucket {bucket.max_batch_size}: {bucket.shape}, lookup depth {bucket.lookup_depth}; {len(b1)} stored B = 1 traces")
only = PolicySettings(buckets=(bucket,), costs=settings.costs)


def line(label, traces):
    cast = replay_settings(traces, only, "cast")
    plain = replay_settings(traces, only, "vanilla")
    tau = cast.tokens / len(cast.outcomes)
    print(f"{label:28s} {len(traces):4d} traces: tau {tau:.3f}, CAST {cast.tokens_per_s:6.2f} tok/s, "
          f"plain {plain.tokens_per_s:6.2f}, {cast.tokens_per_s / plain.tokens_per_s:.3f}x")
    return cast.tokens_per_s / plain.tokens_per_s


line("tune's even sample", even_sample(b1, 40))
line("every stored trace", b1)
ratios = [line(f"offset {k} of every 6th", b1[k::6][:40]) for k in range(6)]
print(f"40-trace samples: {statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}]")
