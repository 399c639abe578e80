"""Plain decoding and CAST under several published profiles of one weight format, interleaved
round by round in one process, per dataset and batch size (tools/benchkit's runners; the
profiles' own trees, thresholds and cost tables).  Ratios are to plain decoding, per round.
Usage: ab_profiles.py DATASETS(comma) BATCHES(comma) ROUNDS PROMPTS OUT.json A.yaml B.yaml ..."""
import json, statistics, sys
from pathlib import Path
sys.path.insert(0, '.')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling

datasets, batches = sys.argv[1].split(','), [int(b) for b in sys.argv[2].split(',')]
rounds, count, out_path, paths = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6:]
profiles = [load_settings(p, 'cpu').profile for p in paths]
formats = {str(p.weight_format) for p in profiles}
assert len(formats) == 1, f"one weight format, got {formats}"
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=formats.pop())
records = []
for dataset in datasets:
    texts = [json.loads(line)['turns'][0] for line in open(f'datasets/{dataset}.jsonl')][:count]
    prompts = [pair.format_prompt(t) for t in texts]
    context = max(len(pair.tokenizer.encode(p)) for p in prompts) + 32 + 8
    for batch in batches:
        params = sampling(len(prompts), 0.0, 32)
        runners = {'plain': EngineRunner(pair.engine(make_policy('vanilla', profiles[0].settings), batch, context),
                                         prompts, params)}
        for path, profile in zip(paths, profiles):
            engine = pair.engine(make_policy('cast', profile.settings), batch, context)
            runners[f'cast {Path(path).stem}'] = EngineRunner(engine, prompts, params)
        measured = interleave(runners, rounds)
        base = measured['plain']
        for label, m in measured.items():
            ratios = m.ratios_to(base)
            records.append({'dataset': dataset, 'batch_size': batch, 'runner': label, 'tokens_per_s': m.tokens_per_s,
                            'rates': m.rates, 'per_round_ratios': ratios})
            print(f"{dataset} B={batch} {label:36s} {m.tokens_per_s:6.1f} tok/s  per-round ratio to plain "
                  f"median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)
        json.dump(records, open(out_path, 'w'), indent=1)
