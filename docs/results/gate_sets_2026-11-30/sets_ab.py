"""The shipped profile's bucket at one batch size against plain decoding, on several
disjoint prompt sets in one process: three slices of the tuning prompts
(autotune/prompts.txt, what the live gate runs) and the first prompts of mt_bench and
humaneval.  Interleaved rounds per set (tools/benchkit/rounds.py), greedy, chat template.

    .venv/bin/python docs/results/gate_sets_2026-11-30/sets_ab.py BATCH ROUNDS TOKENS [PROFILE [PER_SET]]

PROFILE defaults to profiles/cpu.yaml; PER_SET (prompts per set) to BATCH.

Question: does a bucket's live ratio on the gate's prompts say what it does on other
prompts, or does it move with the prompt set?
"""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling, summarise

batch, rounds, tokens = map(int, sys.argv[1:4])
path = sys.argv[4] if len(sys.argv) > 4 else 'profiles/cpu.yaml'
per_set = int(sys.argv[5]) if len(sys.argv) > 5 else batch
profile = load_settings(path, 'cpu').profile
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(profile.weight_format))
tune = list(load_prompts().texts)


def dataset(name):
    return [(r['turns'][0] if 'turns' in r else r['prompt']) for r in map(json.loads, open(f'datasets/{name}.jsonl'))]


sets = {f'tune[{i}:{i + per_set}]': tune[i:i + per_set] for i in range(0, min(len(tune), 3 * per_set), per_set)}
sets['mt_bench'] = dataset('mt_bench')[:per_set]
sets['humaneval'] = dataset('humaneval')[:per_set]
cpu = open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].split(':')[-1].strip()
bucket = profile.settings.for_batch(batch)
print(f"cpu {cpu}; {path} bucket <= {bucket.max_batch_size} (speculate: {bucket.speculate}); B={batch} "
      f"rounds={rounds} tokens={tokens} prompts per set {per_set}", flush=True)
for name, texts in sets.items():
    prompts = [pair.format_prompt(t) for t in texts]
    context = max(len(pair.tokenizer.encode(p)) for p in prompts) + tokens + 16
    params = sampling(len(prompts), 0.0, tokens)
    runners = {m: EngineRunner(pair.engine(make_policy(m, profile.settings), batch, context), prompts, params)
               for m in ('vanilla', 'cast')}
    measured = interleave(runners, rounds)
    cast, plain = measured['cast'], measured['vanilla']
    ratios = cast.ratios_to(plain)
    s = summarise(cast.typical)
    prompt_tokens = statistics.mean(len(pair.tokenizer.encode(p)) for p in prompts)
    print(f"{name:14s} prompt {prompt_tokens:5.0f} tok  plain {plain.tokens_per_s:6.1f}  cast {cast.tokens_per_s:6.1f} "
          f"tok/s  per-round {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]  "
          f"tau {s['tau']:.3f}  depth {s['mean_depth']:.2f}  step {s['step_ms']:.1f} ms "
          f"(charged {s['charged_step_ms']:.1f})", flush=True)
    print(json.dumps({'set': name, 'batch_size': batch, 'tokens': tokens, 'cpu': cpu, 'per_round': ratios,
                      'plain_rates': plain.rates, 'cast_rates': cast.rates, 'tau': s['tau']}), flush=True)
