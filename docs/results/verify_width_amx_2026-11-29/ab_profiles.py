"""CAST under two profiles, interleaved in one process with plain decoding (B = 1..):
the profile before this session's re-profile (git HEAD~ of profiles/cpu.yaml) against
the re-tuned one.  Usage: ab_profiles.py OLD.yaml NEW.yaml DATASET BATCH ROUNDS PROMPTS"""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling

old_path, new_path, dataset, batch, rounds, count = sys.argv[1:7]
batch, rounds, count = int(batch), int(rounds), int(count)
old = load_settings(old_path, 'cpu').profile
new = load_settings(new_path, 'cpu').profile
assert str(old.weight_format) == str(new.weight_format)
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(new.weight_format))
texts = [json.loads(l)['turns'][0] for l in open(f'datasets/{dataset}.jsonl')][:count]
prompts = [pair.format_prompt(t) for t in texts]
context = max(len(pair.tokenizer.encode(p)) for p in prompts) + 32 + 8
params = sampling(len(prompts), 0.0, 32)
runners = {
    'vanilla': EngineRunner(pair.engine(make_policy('vanilla', new.settings), batch, context), prompts, params),
    'cast-before': EngineRunner(pair.engine(make_policy('cast', old.settings), batch, context), prompts, params),
    'cast-after': EngineRunner(pair.engine(make_policy('cast', new.settings), batch, context), prompts, params),
}
measured = interleave(runners, rounds)
base = measured['vanilla']
out = {'dataset': dataset, 'batch_size': batch, 'rounds': rounds, 'prompts': count, 'methods': {}}
for label, m in measured.items():
    ratios = m.ratios_to(base)
    out['methods'][label] = {'tokens_per_s': m.tokens_per_s, 'rates': m.rates,
                             'ratio_of_medians': m.tokens_per_s / base.tokens_per_s,
                             'per_round_ratios': ratios}
    print(f"{dataset} B={batch} {label:12s} {m.tokens_per_s:6.1f} tok/s  {m.tokens_per_s / base.tokens_per_s:.2f}x  "
          f"per-round median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)
print(json.dumps(out))
