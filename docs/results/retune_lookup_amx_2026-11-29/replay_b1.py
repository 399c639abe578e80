"""Replayed B = 1 and B = 2 throughput of the re-tuned profile's buckets with and without their lookup
branch, and of the previous profile's buckets (d7a4174, tuned without the branch), on the traces the
tuner used (the 40 evenly spaced traces of each bucket that hold the branch), with the published
profile's cost tables (AMX Xeon, 2026-11-29).  Run from the repository root with the main venv."""
import subprocess
from dataclasses import replace

import yaml

from autotune.store import Store, default_db_path
from autotune.tuner import assign_buckets, even_sample, replay_settings
from sglang_cast.cast import BucketSettings, PolicySettings
from sglang_cast.profile import load_profile

TARGET = "embedded:SmolLM2-135M-Instruct"
DRAFT = "/work/main/sglang_cast/assets/smollm2-135m-eagle#sha256:c443ad1a096e"

new = load_profile("profiles/cpu.yaml").profile.settings
old = [BucketSettings.from_dict(b) for b in yaml.safe_load(subprocess.run(
    ["git", "show", "d7a4174:profiles/cpu.yaml"], capture_output=True, text=True, check=True).stdout)["buckets"]]
stored = [s.trace for s in Store(default_db_path()).traces(TARGET, DRAFT) if s.trace.lookup_depth >= 8]
by_bucket = assign_buckets(stored, tuple(b.max_batch_size for b in new.buckets))


def rate(traces, bucket: BucketSettings, policy: str = "cast") -> tuple[float, float]:
    result = replay_settings(traces, PolicySettings(buckets=(bucket,), costs=new.costs), policy)
    return result.tokens_per_s, result.tau


for index in (0, 1):
    bucket, traces = new.buckets[index], even_sample(by_bucket[new.buckets[index].max_batch_size], 40)
    plain = rate(traces, bucket, "vanilla")[0]
    rows = {
        f"re-tuned (lookup {bucket.lookup_depth})": rate(traces, bucket),
        "re-tuned, lookup 0": rate(traces, replace(bucket, lookup_depth=0)),
        "previous profile's bucket (no lookup)": rate(traces, replace(old[index], speculate=True)),
        "previous profile's bucket + lookup 8": rate(traces, replace(old[index], speculate=True, lookup_depth=8)),
    }
    print(f"B <= {bucket.max_batch_size}: {len(traces)} traces, plain {plain:.2f} tok/s replayed")
    for name, (tps, tau) in rows.items():
        print(f"  {name}: {tps:.2f} tok/s ({tps / plain:.3f}x plain), tau {tau:.3f}")
