"""CAST and plain decoding under two published profiles of different weight formats (each
profile on its own format's models), interleaved round by round in one process, per
dataset and batch size.  Ratios are to the first profile's plain decoding, per round.
Usage: ab_formats.py A.yaml B.yaml DATASETS(comma) BATCHES(comma) ROUNDS PROMPTS OUT.json"""
import json, statistics, sys
sys.path.insert(0, '.')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling

paths, datasets, batches = sys.argv[1:3], sys.argv[3].split(','), [int(b) for b in sys.argv[4].split(',')]
rounds, count, out_path = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
profiles = [load_settings(p, 'cpu').profile for p in paths]
pairs = [load_model_pair(None, None, 'cpu', 'float32', weight_format=str(p.weight_format)) for p in profiles]
records = []
for dataset in datasets:
    texts = [json.loads(line)['turns'][0] for line in open(f'datasets/{dataset}.jsonl')][:count]
    for batch in batches:
        runners = {}
        for profile, pair in zip(profiles, pairs):
            prompts = [pair.format_prompt(t) for t in texts]
            context = max(len(pair.tokenizer.encode(p)) for p in prompts) + 32 + 8
            params = sampling(len(prompts), 0.0, 32)
            fmt = str(profile.weight_format)
            for method in ('vanilla', 'cast'):
                engine = pair.engine(make_policy(method, profile.settings), batch, context)
                runners[f'{method} {fmt}'] = EngineRunner(engine, prompts, params)
        measured = interleave(runners, rounds)
        base = next(iter(measured.values()))
        for label, m in measured.items():
            ratios = m.ratios_to(base)
            records.append({'dataset': dataset, 'batch_size': batch, 'runner': label, 'tokens_per_s': m.tokens_per_s,
                            'rates': m.rates, 'per_round_ratios': ratios})
            print(f"{dataset} B={batch} {label:44s} {m.tokens_per_s:6.1f} tok/s  per-round ratio to the first "
                  f"median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)
        json.dump(records, open(out_path, 'w'), indent=1)
