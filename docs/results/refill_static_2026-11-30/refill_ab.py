"""Static batches against refilled slots, on the same prompts, one process.

    .venv/bin/python docs/results/refill_static_2026-11-30/refill_ab.py BATCH PROMPTS ROUNDS TOKENS [DATASET ...]

For each dataset, its first PROMPTS first turns are decoded four ways, interleaved
(tools/benchkit/rounds.py): plain decoding and the shipped profile's CAST, each as
PROMPTS / BATCH static batches one after the other (every batch runs until its slowest
sequence is done: `static`) and as one queue through BATCH slots that refill as
sequences finish (`refill`, what tools/bench.py and a server do).  Greedy, chat template.

Question (session 40's "Next" 0): CAST at B = 16 ran 0.95x plain on mt_bench's first 16
prompts as one static batch and 1.11x on its first 48 through 16 slots.  Is the gap the
refill or the prompt set?
"""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, Round, interleave, sampling, summarise

batch, count, rounds, tokens = map(int, sys.argv[1:5])
names = sys.argv[5:] or ['mt_bench']
profile = load_settings('profiles/cpu.yaml', 'cpu').profile
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(profile.weight_format))
cpu = open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].split(':')[-1].strip()


class StaticRunner:
    """Static batches of one method, one after the other; the round is their sum."""

    def __init__(self, runners: list[EngineRunner]) -> None:
        self.runners = runners
        self.batches: list[list[Round]] = [[] for _ in runners]  # per batch, its timed rounds

    def warm_up(self) -> None:
        for r in self.runners:
            r.warm_up()

    def run(self) -> Round:
        done = [r.run() for r in self.runners]
        for kept, one in zip(self.batches, done):
            kept.append(one)
        return Round([t for d in done for t in d.outputs], sum(d.seconds for d in done),
                     [h for d in done for h in d.history], [c for d in done for c in d.charged_ms])


def dataset(name):
    return [(r['turns'][0] if 'turns' in r else r['prompt']) for r in map(json.loads, open(f'datasets/{name}.jsonl'))]


print(f"cpu {cpu}; profiles/cpu.yaml bucket <= {profile.settings.for_batch(batch).max_batch_size}; B={batch} "
      f"prompts={count} rounds={rounds} tokens={tokens}", flush=True)
for name in names:
    prompts = [pair.format_prompt(t) for t in dataset(name)[:count]]
    context = max(len(pair.tokenizer.encode(p)) for p in prompts) + tokens + 16
    runners = {}
    for method in ('vanilla', 'cast'):
        engine = lambda: pair.engine(make_policy(method, profile.settings), batch, context)
        runners[f'{method}/static'] = StaticRunner(
            [EngineRunner(engine(), prompts[i:i + batch], sampling(batch, 0.0, tokens))
             for i in range(0, count, batch)])
        runners[f'{method}/refill'] = EngineRunner(engine(), prompts, sampling(count, 0.0, tokens))
    measured = interleave(runners, rounds)
    outputs = {label: m.typical.outputs for label, m in measured.items()}
    for mode in ('static', 'refill'):
        cast, plain = measured[f'cast/{mode}'], measured[f'vanilla/{mode}']
        ratios = cast.ratios_to(plain)
        s = summarise(cast.typical)
        same = sum(c == p for c, p in zip(outputs[f'cast/{mode}'], outputs[f'vanilla/{mode}']))
        print(f"{name:10s} {mode:6s} plain {plain.tokens_per_s:6.1f}  cast {cast.tokens_per_s:6.1f} tok/s  "
              f"per-round {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]  tau {s['tau']:.3f}  "
              f"cast iterations {len(cast.typical.history)}  plain iterations {len(plain.typical.history)}  outputs equal to plain's {same}/{count}", flush=True)
        print(json.dumps({'set': name, 'mode': mode, 'batch_size': batch, 'prompts': count, 'tokens': tokens,
                          'cpu': cpu, 'per_round': ratios, 'plain_rates': plain.rates, 'cast_rates': cast.rates,
                          'tau': s['tau'], 'outputs_equal_to_plain': same}), flush=True)
    plain_static, cast_static = runners['vanilla/static'], runners['cast/static']
    for index, (p, c) in enumerate(zip(plain_static.batches, cast_static.batches)):
        ratios = [p_r.seconds / c_r.seconds for p_r, c_r in zip(p, c)]
        print(f"{name:10s} static batch {index} (prompts {index * batch}-{index * batch + batch - 1}): "
              f"per-round {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]  "
              f"cast iterations {len(c[0].history)}  plain iterations {len(p[0].history)}", flush=True)
    print(f"{name}: plain static and plain refill outputs equal on "
          f"{sum(a == b for a, b in zip(outputs['vanilla/static'], outputs['vanilla/refill']))}/{count} prompts "
          "(batch composition moves greedy near-ties)", flush=True)
