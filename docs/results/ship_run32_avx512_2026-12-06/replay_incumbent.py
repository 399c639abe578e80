"""Replay the replaced profile's B <= 1 tree beside the re-tune's pick on the re-tune's own B <= 1 traces
(run 32's ship, 2026-12-06), both charged with the cost tables the re-tune published. From the repository root,
with the ship's autotune.db in the cache: .venv/bin/python docs/results/ship_run32_avx512_2026-12-06/replay_incumbent.py"""
from autotune.store import Store, default_db_path
from autotune.tuner import replay_bucket
from sglang_cast.profile import load_profile

store = Store(default_db_path())
setup = store.setups()[0]  # run 32's, the most recently measured
assert "d4904d23d78a" in setup.draft_model, setup
target_id = setup.target_model.split("@")[0]
stored = [s for s in store.traces(target_id, setup.draft_model) if s.batch_size == 1]
traces = [s.trace for s in stored]
old = load_profile("docs/results/ship_run31_whole_avx512_2026-12-06/cpu-avx512.yaml").profile
new = load_profile("docs/results/ship_run32_avx512_2026-12-06/cpu-avx512.yaml").profile
print(f"{len(traces)} B = 1 iterations; setup {setup.target_model}")
costs = new.settings.costs  # the tables the re-tune published (after its live refit)
for name, prof in (("replaced (run 31's tune)", old), ("new (run 32's tune)", new)):
    bucket = prof.settings.buckets[0]
    r = replay_bucket(traces, bucket, costs)
    print(f"{name:26s} {bucket.shape} {bucket.thresholds} fifo {bucket.fifo_len} lookup {bucket.lookup_depth}: "
          f"replayed {r.tokens_per_s:.1f} tokens/s, tau {r.tau:.3f}")
