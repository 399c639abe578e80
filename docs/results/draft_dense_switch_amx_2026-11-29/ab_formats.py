"""CAST under two profiles tuned for two weight formats, interleaved in one process with
plain decoding: profiles/cpu.yaml (draft head int8 at every row count) against the
profile tuned with the draft's own dense switch (int8 below 8 rows, bf16 from 8).  The
target part of both formats is the same, so plain decoding runs once, on the first pair.
Usage: ab_formats.py BEFORE.yaml AFTER.yaml DATASET BATCH ROUNDS PROMPTS"""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling

before_path, after_path, dataset, batch, rounds, count = sys.argv[1:7]
batch, rounds, count = int(batch), int(rounds), int(count)
profiles = {'before': load_settings(before_path, 'cpu').profile, 'after': load_settings(after_path, 'cpu').profile}
pairs = {k: load_model_pair(None, None, 'cpu', 'float32', weight_format=str(p.weight_format)) for k, p in profiles.items()}
pair = pairs['before']
texts = [json.loads(l)['turns'][0] for l in open(f'datasets/{dataset}.jsonl')][:count]
prompts = [pair.format_prompt(t) for t in texts]
context = max(len(pair.tokenizer.encode(p)) for p in prompts) + 32 + 8
params = sampling(len(prompts), 0.0, 32)
runners = {'vanilla': EngineRunner(pair.engine(make_policy('vanilla', profiles['before'].settings), batch, context),
                                   prompts, params)}
for k in ('before', 'after'):
    runners[f'cast-{k}'] = EngineRunner(pairs[k].engine(make_policy('cast', profiles[k].settings), batch, context),
                                        prompts, params)
measured = interleave(runners, rounds)
base = measured['vanilla']
out = {'dataset': dataset, 'batch_size': batch, 'rounds': rounds, 'prompts': count,
       'formats': {k: str(p.weight_format) for k, p in profiles.items()}, 'methods': {}}
for label, m in measured.items():
    ratios = m.ratios_to(base)
    out['methods'][label] = {'tokens_per_s': m.tokens_per_s, 'rates': m.rates,
                             'ratio_of_medians': m.tokens_per_s / base.tokens_per_s, 'per_round_ratios': ratios}
    print(f"{dataset} B={batch} {label:12s} {m.tokens_per_s:6.1f} tok/s  {m.tokens_per_s / base.tokens_per_s:.2f}x  "
          f"per-round median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)
print(json.dumps(out))
