"""Interleaved A/B at B = 1: CAST (the profile's trees) with the draft head in int8
against int4, and plain decoding, on one target format; per round tokens/s, τ and
the draft forwards' ms per iteration.  Usage: ab_draft_int4.py PROFILE DATASET PROMPTS TOKENS ROUNDS"""
import statistics, sys, time
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine import StepLog
from tools.benchkit.inputs import load_settings

profile, dataset, n, tokens, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(2)
settings = load_settings(profile, 'cpu').profile.settings
target = 'int4/int8:dense16:bf16'
pairs = {d: load_model_pair(None, None, 'cpu', 'float32', weight_format=f'{target}+{d}') for d in ('int8', 'int4')}
texts = [pairs['int8'].format_prompt(t) for t in load_prompts(dataset).texts[:n]]
ctx = max(len(pairs['int8'].tokenizer.encode(t)) for t in texts) + tokens + 8
params = SamplingParams(max_new_tokens=tokens)
engines = {'vanilla': pairs['int8'].engine(make_policy('vanilla', settings), 1, ctx)}
engines.update({f'cast+{d}': pair.engine(make_policy('cast', settings), 1, ctx) for d, pair in pairs.items()})
for engine in engines.values():
    engine.generate(texts[:2], params)
results = {name: [] for name in engines}
outputs = {}
for r in range(rounds):
    for name, engine in engines.items():
        log = StepLog()
        t = time.perf_counter(); out = engine.generate(texts, params, on_step=log); wall = time.perf_counter() - t
        produced = sum(len(o.token_ids) for o in out)
        recs = log.records
        tau = sum(sum(x.accepted) + x.batch_size for x in recs) / sum(x.batch_size for x in recs)
        results[name].append((produced / wall, tau, statistics.fmean(x.draft_ms for x in recs), statistics.fmean(x.step_ms for x in recs)))
        outputs[name] = [o.token_ids for o in out]
    print(f"round {r}: " + ", ".join(f"{k} {v[-1][0]:.1f} tok/s" for k, v in results.items()), flush=True)
base = statistics.median(x[0] for x in results['vanilla'])
print(f"== {dataset} B=1 {n} prompts x {tokens} tokens, {rounds} rounds, target {target}")
for name, rs in results.items():
    ratios = [x[0] / v[0] for x, v in zip(rs, results['vanilla'])]
    print(f"  {name:10s} tok/s {statistics.median(x[0] for x in rs):6.1f}  vs plain (per round) median {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}, {max(ratios):.3f}]  tau {statistics.median(x[1] for x in rs):.3f}  draft ms/iter {statistics.median(x[2] for x in rs):.2f}  step ms {statistics.median(x[3] for x in rs):.2f}")
same = sum(a == b for a, b in zip(outputs['cast+int4'], outputs['vanilla']))
print(f"  cast+int4 outputs equal to plain decoding's: {same}/{len(texts)}")
