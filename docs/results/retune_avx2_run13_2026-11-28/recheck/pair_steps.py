"""Alternate single steps of the vanilla and cast engines at batch B and time each iterate: paired.

    python docs/results/retune_avx2_run13_2026-11-28/recheck/pair_steps.py profiles/cpu-avx2.yaml 2 int8

from the repository root (it reads datasets/mt_bench.jsonl).
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repository root
from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import SamplingParams, make_policy  # noqa: E402
from tools.benchkit.inputs import load_settings  # noqa: E402

torch.set_num_threads(2)
profile_path, batch, fmt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
prof = load_settings(profile_path, "cpu").profile
pair = load_model_pair(None, None, "cpu", "float32", weight_format=fmt)
texts = [pair.format_prompt(t) for t in load_prompts("datasets/mt_bench.jsonl").texts[:16]]
names = ["vanilla", "cast"]
engines = {m: pair.engine(make_policy(m, prof.settings), batch, 1024) for m in names}
params = SamplingParams(max_new_tokens=32, ignore_eos=True)
steps = {m: [] for m in engines}
for rnd in range(3):
    for start in range(0, len(texts), batch):
        for e in engines.values():
            for t in texts[start:start + batch]:
                e.add_request(t, params)
        order = list(engines)
        while any(e.has_work for e in engines.values()):
            order = order[::-1]
            for m in order:
                e = engines[m]
                if not e.has_work:
                    continue
                e._admit()
                if e.running:
                    running = list(e.running)
                    t0 = time.perf_counter()
                    e.runner.iterate(running)
                    t1 = time.perf_counter()
                    for r in running:
                        if r.finished:
                            e._retire(r)
                    if rnd:
                        steps[m].append(t1 - t0)
for m in engines:
    print(m, "iterate median ms", round(1e3 * statistics.median(steps[m]), 1), "n", len(steps[m]))
ratios = [c / v for v, c in zip(steps["vanilla"], steps["cast"])]
q = statistics.quantiles(ratios, n=4)
print(f"B={batch} {fmt}: paired cast/vanilla step median {statistics.median(ratios):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})")
