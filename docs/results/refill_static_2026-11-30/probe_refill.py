"""Per-iteration look at one method, static batches against refilled slots (session 41).

    .venv/bin/python docs/results/refill_static_2026-11-30/probe_refill.py METHOD

The first 48 mt_bench first turns, B = 16, 64 tokens, the shipped profile: three static batches
(three engines) and one queue through 16 slots (one engine), alternating, 3 rounds after a
warm-up; prints wall time, summed step time, iterations and the batch sizes they ran at."""
import collections, json, sys, time
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from sglang_cast.engine import StepLog
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import sampling
profile = load_settings('profiles/cpu.yaml', 'cpu').profile
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(profile.weight_format))
texts = [json.loads(l)['turns'][0] for l in open('datasets/mt_bench.jsonl')][:48]
prompts = [pair.format_prompt(t) for t in texts]
context = max(len(pair.tokenizer.encode(p)) for p in prompts) + 64 + 16
method = sys.argv[1]
def run(engine, ps):
    log = StepLog(); t = time.perf_counter()
    res = engine.generate(ps, sampling(len(ps), 0.0, 64), on_step=log)
    return time.perf_counter() - t, log.records, res
static = [pair.engine(make_policy(method, profile.settings), 16, context) for _ in range(3)]
refill = pair.engine(make_policy(method, profile.settings), 16, context)
for e, i in zip(static, range(0, 48, 16)): run(e, prompts[i:i+16])
run(refill, prompts)
for r in range(3):
    for mode in ('static', 'refill'):
        if mode == 'static':
            parts = [run(e, prompts[i:i+16]) for e, i in zip(static, range(0, 48, 16))]
            secs = sum(p[0] for p in parts); recs = [x for p in parts for x in p[1]]; res = [x for p in parts for x in p[2]]
        else:
            secs, recs, res = run(refill, prompts)
        sizes = collections.Counter(x.batch_size for x in recs)
        lens = [len(x.token_ids) for x in res]
        print(f"{method} {mode}: {secs:.2f}s  iters {len(recs)}  step sum {sum(x.step_ms for x in recs)/1000:.2f}s  "
              f"verify {sum(x.verify_ms for x in recs)/1000:.2f}s draft {sum(x.draft_ms for x in recs)/1000:.2f}s "
              f"batch sizes {sorted(sizes.items())}  ctx mean {sum(x.context_len for x in recs)/len(recs):.0f}  "
              f"tokens {sum(lens)} short {[l for l in lens if l < 64]}", flush=True)
