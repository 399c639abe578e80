"""CAST with masked attention by three small kernels below 64 grouped query rows (the CPU's
rule before 2026-11-30, `kernels3`) against the fused SDPA kernel at every size (`sdpa`, the
CPU's rule since), interleaved in one process with plain decoding (`profiles/cpu.yaml`,
chat-templated prompts, greedy).  Each runner installs its rule as `attention.grouped_attention`
(which every layer calls through the module) before it decodes.  Each CAST variant's outputs
are compared with plain decoding's under the same rule.

    .venv/bin/python docs/results/sdpa_cpu_2026-11-30/engine_ab.py DATASET BATCH ROUNDS PROMPTS TOKENS

At B > 1 plain decoding's rows differ in context, so its attention is masked too: it runs in
both variants there (`vanilla-sdpa`); at B = 1 it attends unmasked in both.
"""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
from tools.benchkit.rounds import EngineRunner, interleave, sampling, summarise
import sglang_cast.models.attention as A
from rules import FUSED, kernels3  # this folder

dataset, batch, rounds, count, tokens = sys.argv[1], *map(int, sys.argv[2:6])
profile = load_settings('profiles/cpu.yaml', 'cpu').profile
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(profile.weight_format))
rows = [json.loads(line) for line in open(f'datasets/{dataset}.jsonl')][:count]
prompts = [pair.format_prompt(r['turns'][0] if 'turns' in r else r['prompt']) for r in rows]
context = max(len(pair.tokenizer.encode(p)) for p in prompts) + tokens + 16
params = sampling(len(prompts), 0.0, tokens)


RULES = {64: kernels3, 0: FUSED}


class Switched(EngineRunner):
    """An engine run under one attention rule (64: `kernels3`, 0: fused) for its rounds."""

    def __init__(self, rows, *args):
        super().__init__(*args)
        self.rows = rows

    def warm_up(self):
        A.grouped_attention = RULES[self.rows]
        super().warm_up()

    def run(self):
        A.grouped_attention = RULES[self.rows]
        return super().run()


runners = {
    'vanilla': Switched(64, pair.engine(make_policy('vanilla', profile.settings), batch, context), prompts, params),
    'cast-kernels3': Switched(64, pair.engine(make_policy('cast', profile.settings), batch, context), prompts, params),
    'cast-sdpa': Switched(0, pair.engine(make_policy('cast', profile.settings), batch, context), prompts, params),
}
if batch > 1:
    runners['vanilla-sdpa'] = Switched(0, pair.engine(make_policy('vanilla', profile.settings), batch, context),
                                       prompts, params)
measured = interleave(runners, rounds)
base = measured['vanilla']
out = {'dataset': dataset, 'batch_size': batch, 'rounds': rounds, 'prompts': count, 'tokens': tokens,
       'cpu': open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].strip(': '), 'methods': {}}
for label, m in measured.items():
    ratios = m.ratios_to(base)
    s = summarise(m.typical)
    plain = measured['vanilla-sdpa' if label.endswith('sdpa') and batch > 1 else 'vanilla']
    same = sum(a == b for a, b in zip(m.typical.outputs, plain.typical.outputs))
    out['methods'][label] = {'tokens_per_s': m.tokens_per_s, 'rates': m.rates, 'per_round_ratios': ratios,
                             'tau': s['tau'], 'step_ms': s['step_ms'], 'draft_ms': s['draft_ms'],
                             'verify_ms': s['verify_ms'], 'outputs_equal_to_plain': same}
    print(f"{dataset} B={batch} {label:14s} {m.tokens_per_s:6.1f} tok/s  per-round vs plain "
          f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]  tau {s['tau']:.3f}  "
          f"draft {s['draft_ms']:.2f} verify {s['verify_ms']:.2f} ms  outputs = plain: {same}/{len(m.typical.outputs)}",
          flush=True)
k, f = measured['cast-kernels3'], measured['cast-sdpa']
pair_ratios = [b / a for a, b in zip(k.rates, f.rates)]
out['sdpa_over_kernels3_per_round'] = pair_ratios
print(f"cast-sdpa / cast-kernels3 per round: {[round(x, 3) for x in pair_ratios]}")
print(json.dumps(out))
