"""How far can trace replay tell B <= 1 trees apart? Run 32's ship tune (2026-12-06), its own traces.

Each candidate tree is replayed once over the tune's 679 B = 1 iterations with the cost tables the tune
published; the outcomes are then summed per prompt, so any set of prompts gives a replayed rate (tokens / charged
ms) without replaying again. Candidates: the study's best distinct trials, the replaced profile's tree (run 31's
tune, fastest live on run 32's head) and the incumbent re-tune's pick. What it prints:

* each tree's rate on all prompts, and its ratio to the replaced tree with a bootstrap interval over prompts;
* the winner's curse: over random halves of the prompts, the tree with the best rate on one half, judged on the
  other half against the replaced tree.

From the repository root, with run 32's ship in the autotune DB (setup d4904d23d78a):
  .venv/bin/python docs/results/replay_noise_2026-12-06/replay_halves.py
"""
import random
import statistics
import time
from collections import defaultdict

import optuna

from autotune.store import Store, default_db_path
from autotune.tuner import bucket_from_params, replay_bucket
from sglang_cast.profile import load_profile

STUDY = "cpu-20261206T180937Z-int4vnni-int8vnni+int8vnni-b1"  # run 32's ship tune, bucket B <= 1
INCUMBENT_STUDY = "cpu-20261206T190202Z-int4vnni-int8vnni+int8vnni-b1"  # its re-tune with --incumbent
SHIPPED = "docs/results/ship_run32_avx512_2026-12-06/cpu-avx512.yaml"
REPLACED = "docs/results/ship_run31_whole_avx512_2026-12-06/cpu-avx512.yaml"
TOP = 15
SPLITS = 400
BOOT = 2000

store = Store(default_db_path())
setup = next(s for s in store.setups() if "d4904d23d78a" in s.draft_model)
stored = [s for s in store.traces(setup.target_model.split("@")[0], setup.draft_model) if s.batch_size == 1]
prompts = sorted({s.prompt_ids[0] for s in stored})
print(f"{len(stored)} B = 1 iterations over {len(prompts)} prompts; setup {setup.target_model}")
costs = load_profile(SHIPPED).profile.settings.costs

candidates = {"replaced (run 31 tune)": load_profile(REPLACED).profile.settings.buckets[0],
              "shipped (run 32 tune)": load_profile(SHIPPED).profile.settings.buckets[0]}
incumbent_best = optuna.load_study(study_name=INCUMBENT_STUDY, storage=store.url).best_trial
candidates["re-tune --incumbent"] = bucket_from_params(incumbent_best.params, 1)
seen = {(b.shape, b.thresholds, b.fifo_len, b.lookup_depth) for b in candidates.values()}
trials = sorted((t for t in optuna.load_study(study_name=STUDY, storage=store.url).trials if t.value is not None),
                key=lambda t: -t.value)
for t in trials:
    bucket = bucket_from_params(t.params, 1)
    key = (bucket.shape, bucket.thresholds, bucket.fifo_len, bucket.lookup_depth)
    if key not in seen:
        seen.add(key)
        candidates[f"trial {t.number}"] = bucket
    if len(candidates) >= TOP + 3:
        break

# per candidate, per prompt: [tokens, charged ms]
per_prompt: dict[str, dict[str, list[float]]] = {}
for name, bucket in candidates.items():
    start = time.perf_counter()
    result = replay_bucket([s.trace for s in stored], bucket, costs)
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s, o in zip(stored, result.outcomes):
        sums[s.prompt_ids[0]][0] += o.tokens
        sums[s.prompt_ids[0]][1] += o.draft_ms + o.verify_ms
    per_prompt[name] = sums
    print(f"{name:24s} top-k {bucket.shape.top_k} depth {bucket.shape.max_depth} m {bucket.shape.num_verify_tokens:2d} "
          f"lookup {bucket.lookup_depth}: {result.tokens_per_s:6.1f} tokens/s, tau {result.tau:.3f} "
          f"({time.perf_counter() - start:.1f} s)")


def rate(name: str, subset) -> float:
    tokens = sum(per_prompt[name][p][0] for p in subset)
    ms = sum(per_prompt[name][p][1] for p in subset)
    return 1000.0 * tokens / ms


base = "replaced (run 31 tune)"
rng = random.Random(0)
print(f"\nratio to the replaced tree, all prompts, with a 95 % bootstrap interval over prompts ({BOOT} draws):")
for name in candidates:
    draws = sorted(rate(name, s) / rate(base, s) for s in ([rng.choice(prompts) for _ in prompts]
                                                           for _ in range(BOOT)))
    print(f"  {name:24s} {rate(name, prompts) / rate(base, prompts):.4f} "
          f"[{draws[int(0.025 * BOOT)]:.4f} … {draws[int(0.975 * BOOT)]:.4f}]")

print(f"\nwinner's curse over {SPLITS} random halves of the prompts (pick on half A, judge on half B):")
in_sample, out_sample, picks = [], [], defaultdict(int)
for _ in range(SPLITS):
    half = set(rng.sample(prompts, len(prompts) // 2))
    a, b = sorted(half), [p for p in prompts if p not in half]
    best = max(candidates, key=lambda n: rate(n, a))
    picks[best] += 1
    in_sample.append(rate(best, a) / rate(base, a))
    out_sample.append(rate(best, b) / rate(base, b))
q = lambda xs, f: sorted(xs)[int(f * (len(xs) - 1))]
print(f"  pick / replaced on A: median {statistics.median(in_sample):.4f} (5-95 % {q(in_sample, .05):.4f} … "
      f"{q(in_sample, .95):.4f})")
print(f"  pick / replaced on B: median {statistics.median(out_sample):.4f} (5-95 % {q(out_sample, .05):.4f} … "
      f"{q(out_sample, .95):.4f}); below 1 in {sum(x < 1 for x in out_sample)} of {SPLITS}")
print("  picks:", dict(sorted(picks.items(), key=lambda kv: -kv[1])))
