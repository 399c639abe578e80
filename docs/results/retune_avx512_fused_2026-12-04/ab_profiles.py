"""CAST under two published profiles of the same weight format, and plain decoding, on one
loaded model pair, interleaved round by round in one process, per dataset and batch size;
ratios per round to plain decoding.  (ab_formats.py keys its engines by format, so two
profiles of one format collapse there.)
Usage: ab_profiles.py A.yaml B.yaml DATASETS(comma) BATCHES(comma) ROUNDS PROMPTS OUT.json"""
import json, statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling

paths, datasets, batches = sys.argv[1:3], sys.argv[3].split(','), [int(b) for b in sys.argv[4].split(',')]
rounds, count, out_path = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
profiles = {Path(p).parent.name + '/' + Path(p).name: load_settings(p, 'cpu').profile for p in paths}
formats = {str(p.weight_format) for p in profiles.values()}
assert len(formats) == 1, f'one weight format expected, got {formats}'
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=formats.pop())
records = []
for dataset in datasets:
    texts = [json.loads(line)['turns'][0] for line in open(f'datasets/{dataset}.jsonl')][:count]
    prompts = [pair.format_prompt(t) for t in texts]
    context = max(len(pair.tokenizer.encode(p)) for p in prompts) + 32 + 8
    params = sampling(len(prompts), 0.0, 32)
    for batch in batches:
        first = next(iter(profiles.values()))
        runners = {'plain': EngineRunner(pair.engine(make_policy('vanilla', first.settings), batch, context), prompts, params)}
        for label, profile in profiles.items():
            runners[f'cast {label}'] = EngineRunner(pair.engine(make_policy('cast', profile.settings), batch, context),
                                                    prompts, params)
        measured = interleave(runners, rounds)
        base = measured['plain']
        for label, m in measured.items():
            ratios = m.ratios_to(base)
            records.append({'dataset': dataset, 'batch_size': batch, 'runner': label, 'tokens_per_s': m.tokens_per_s,
                            'rates': m.rates, 'per_round_ratios': ratios})
            print(f"{dataset} B={batch} {label:50s} {m.tokens_per_s:6.1f} tok/s  per-round ratio to plain "
                  f"median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)
        json.dump(records, open(out_path, 'w'), indent=1)
