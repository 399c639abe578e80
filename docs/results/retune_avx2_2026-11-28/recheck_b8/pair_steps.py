"""Alternate single steps of the vanilla and cast engines (B=8) and time each iterate: paired."""
import sys, time, statistics, torch
sys.path.insert(0, "/work/main")
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from tools.benchkit.inputs import load_settings
torch.set_num_threads(2)
prof = load_settings(sys.argv[1] if len(sys.argv) > 1 else "profiles/cpu-avx2.yaml", "cpu").profile
pair = load_model_pair(None, None, "cpu", "float32", weight_format="int4/int8+int8")
texts = [pair.format_prompt(t) for t in load_prompts("datasets/mt_bench.jsonl").texts[:16]]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else ["vanilla", "cast"]
engines = {m: pair.engine(make_policy(m.split(":")[0], prof.settings), 8, 1024) for m in names}
params = SamplingParams(max_new_tokens=32, ignore_eos=True)
it = {m: [] for m in engines}; ad = {m: [] for m in engines}
for rnd in range(3):
    for half in (texts[:8], texts[8:]):
        for e in engines.values():
            for t in half: e.add_request(t, params)
        order = list(engines)
        while any(e.has_work for e in engines.values()):
            order = order[::-1]
            for m in order:
                e = engines[m]
                if not e.has_work: continue
                t0 = time.perf_counter(); fin = e._admit(); t1 = time.perf_counter()
                if e.running:
                    batch = list(e.running); e.runner.iterate(batch); t2 = time.perf_counter()
                    for r in batch:
                        if r.finished: e._retire(r)
                    if rnd: it[m].append(t2 - t1)
                if rnd and t1 - t0 > 1e-3: ad[m].append(t1 - t0)
for m in engines:
    print(m, "iterate median ms", round(1e3 * statistics.median(it[m]), 1), "n", len(it[m]), "sum s", round(sum(it[m]), 2),
          "admit sum s", round(sum(ad[m]), 2))
a, b = names[0], names[1]
ratios = [y / x for x, y in zip(it[a], it[b])]
print(f"paired {b}/{a}: median {statistics.median(ratios):.3f}  q25 {statistics.quantiles(ratios, n=4)[0]:.3f} q75 {statistics.quantiles(ratios, n=4)[2]:.3f}")
