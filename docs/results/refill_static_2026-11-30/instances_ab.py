"""Identical engines, one process: does one engine instance run steadily faster than its twin?

    .venv/bin/python docs/results/refill_static_2026-11-30/instances_ab.py METHOD BATCH PROMPTS ROUNDS TOKENS [COPIES]

COPIES (default 4) engines of one method (vanilla or cast, the shipped profile) are built
alike and decode the same first PROMPTS mt_bench first turns, interleaved round by round
(tools/benchkit/rounds.py).  Equal engines should differ only by the rounds' noise; a
steady per-copy offset would bias any A/B that builds one engine per method.
"""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling

method = sys.argv[1]
batch, count, rounds, tokens = map(int, sys.argv[2:6])
copies = int(sys.argv[6]) if len(sys.argv) > 6 else 4
profile = load_settings('profiles/cpu.yaml', 'cpu').profile
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(profile.weight_format))
cpu = open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].split(':')[-1].strip()
texts = [json.loads(line)['turns'][0] for line in open('datasets/mt_bench.jsonl')][:count]
prompts = [pair.format_prompt(t) for t in texts]
context = max(len(pair.tokenizer.encode(p)) for p in prompts) + tokens + 16
runners = {f'{method}#{i}': EngineRunner(pair.engine(make_policy(method, profile.settings), batch, context), prompts,
                                         sampling(count, 0.0, tokens)) for i in range(copies)}
measured = interleave(runners, rounds)
first = measured[f'{method}#0']
print(f"cpu {cpu}; {method} B={batch} prompts={count} rounds={rounds} tokens={tokens} copies={copies}")
for label, m in measured.items():
    ratios = m.ratios_to(first)
    print(f"{label}: {m.tokens_per_s:6.1f} tok/s  rounds {[round(r, 1) for r in m.rates]}  "
          f"vs #0 per round {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)
print(json.dumps({'method': method, 'batch_size': batch, 'prompts': count, 'tokens': tokens, 'cpu': cpu,
                  'rates': {label: m.rates for label, m in measured.items()}}))
