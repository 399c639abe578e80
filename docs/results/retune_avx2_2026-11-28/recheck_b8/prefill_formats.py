"""Admission of 8 mt_bench prompts (B = 8, plain decoding) with the target in two weight formats, interleaved."""
import sys, time, statistics, torch
sys.path.insert(0, ".")  # run from the repository root
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from tools.benchkit.inputs import load_settings
torch.set_num_threads(2)
settings = load_settings("profiles/cpu-avx2.yaml", "cpu").profile.settings
formats = sys.argv[1].split(",")
engines, texts = {}, None
for wf in formats:
    pair = load_model_pair(None, None, "cpu", "float32", weight_format=wf)
    texts = texts or [pair.format_prompt(t) for t in load_prompts("datasets/mt_bench.jsonl").texts[:16]]
    engines[wf] = pair.engine(make_policy("vanilla", settings), 8, 1024)
params = SamplingParams(max_new_tokens=2)
def admit(engine, batch):
    for t in batch: engine.add_request(t, params)
    t0 = time.perf_counter(); engine._admit(); s = time.perf_counter() - t0
    for r in list(engine.scheduler.running): engine._retire(r)
    return s
for e in engines.values(): admit(e, texts[:8])
res = {wf: [] for wf in engines}
for i in range(3):
    for wf in (formats if i % 2 == 0 else formats[::-1]):
        res[wf].append(admit(engines[wf], texts[:8]) + admit(engines[wf], texts[8:]))
for wf, v in res.items(): print(wf, "16 prompts admitted in s: median", round(statistics.median(v), 2), [round(x, 2) for x in v])
