"""Stacked linears (one packed GEMM for each attention's q/k/v and one for each MLP's gate/up,
`weights.StacksLinears`) against all apart, B = 1, in one process: both pairs loaded from the
same GGUF in the profile's weight format, plain decoding and CAST on each, and the llama.cpp
anchor, timed in interleaved rounds (the order rotates each round), prefill included.  Outputs are
compared between the two pairs and between rounds (CAST's trees follow live timings, and
on a CPU without AMX a verify row can differ from a plain step in fp32 rounding, so a
near-tie can resolve either way from one run to the next; rounds that changed are counted).

Usage (repository root): .venv/bin/python docs/results/stacked_linears_2026-12-04/ab.py \
    PROFILE DATASET PROMPTS TOKENS ROUNDS JSON [FIRST]
FIRST (apart|stacked, default apart) is the layout loaded first: a forward's time moves a few per
cent with load order on this EPYC (forward_ab.py), so runs in both orders are compared."""
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import SamplingParams, make_policy  # noqa: E402
from sglang_cast.engine.format_choice import choose_weight_format  # noqa: E402
from sglang_cast.models import weights  # noqa: E402
from tools.benchkit.anchor import LlamaCppRunner, llamacpp_missing  # noqa: E402
from sglang_cast.models.loader import embedded_gguf_path  # noqa: E402
from tools.benchkit.inputs import load_settings  # noqa: E402

profile, dataset, prompts, tokens, rounds, out = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                                  int(sys.argv[5]), sys.argv[6])
loaded_first = sys.argv[7] if len(sys.argv) > 7 else 'apart'
torch.set_num_threads(2)
loaded = load_settings(profile, 'cpu').profile
fmt = choose_weight_format('auto', device='cpu', profile=loaded).weight_format


def load_pair(stacked: bool):
    """The embedded pair in ``fmt``; ``stacked=False`` packs every linear apart (main before stacking)."""
    stack = weights._stack_linears
    if not stacked:
        weights._stack_linears = lambda root, exact: dict(exact)
    try:
        return load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
    finally:
        weights._stack_linears = stack


pairs = {name: load_pair(name == 'stacked') for name in sorted(('apart', 'stacked'), key=lambda n: n != loaded_first)}
for name, pair in pairs.items():
    layer = pair.target.layers[0]
    assert (layer.self_attn.qkv_proj is not None) == (layer.mlp.gate_up_proj is not None) == (name == 'stacked')
first = pairs['stacked']
texts = [first.format_prompt(t) for t in load_prompts(dataset).texts[:prompts]]
ids = [first.tokenizer.encode(t) for t in texts]
context = max(len(i) for i in ids) + tokens + 8
params = SamplingParams(max_new_tokens=tokens)


class EngineRunner:
    def __init__(self, pair, policy):
        self.engine = pair.engine(make_policy(policy, loaded.settings), 1, context)

    def run(self):
        start = time.perf_counter()
        results = self.engine.generate(texts, params)
        return [list(r.token_ids) for r in results], time.perf_counter() - start


class AnchorRunner:
    def __init__(self):
        self.runner = LlamaCppRunner(embedded_gguf_path(), ids, tokens, first.eos_token_ids, 2)

    def run(self):
        done = self.runner.run()
        return done.outputs, done.seconds


runners = {f'{name}-{policy}': EngineRunner(pair, policy) for policy in ('vanilla', 'cast')
           for name, pair in pairs.items()}
if llamacpp_missing() is None:
    runners['llamacpp'] = AnchorRunner()
names = list(runners)
outputs, seconds, changed = {}, {n: [] for n in names}, {n: 0 for n in names}
for n in names:  # warm-up
    outputs[n] = runners[n].run()[0]
for r in range(rounds):
    order = names[r % len(names):] + names[:r % len(names)]
    for n in order:
        got, s = runners[n].run()
        changed[n] += got != outputs[n]
        seconds[n].append(s)
    print(f'round {r}: ' + ', '.join(f'{n} {seconds[n][-1]:.2f}s' for n in names), flush=True)
count = {n: sum(len(o) for o in outputs[n]) for n in names}
record = {'loaded_first': loaded_first, 'profile': profile, 'weight_format': str(fmt), 'dataset': dataset, 'prompts': prompts,
          'max_new_tokens': tokens, 'rounds': rounds, 'seconds': seconds, 'tokens': count,
          'rounds_whose_outputs_changed': changed,
          'identical': {p: outputs[f'apart-{p}'] == outputs[f'stacked-{p}'] for p in ('vanilla', 'cast')},
          'cast_equals_vanilla': outputs['stacked-cast'] == outputs['stacked-vanilla']}
tps = {n: [count[n] / s for s in seconds[n]] for n in names}
record['tok_s_median'] = {n: statistics.median(v) for n, v in tps.items()}
for p in ('vanilla', 'cast'):
    per_round = [a / b for a, b in zip(seconds[f'apart-{p}'], seconds[f'stacked-{p}'])]
    record[f'speedup_{p}_per_round'] = per_round
    record[f'speedup_{p}_median'] = statistics.median(per_round)
for name in ('apart', 'stacked'):
    per_round = [a / b for a, b in zip(seconds[f'{name}-vanilla'], seconds[f'{name}-cast'])]
    record[f'cast_over_plain_{name}_median'] = statistics.median(per_round)
    record[f'cast_over_plain_{name}_per_round'] = per_round
if 'llamacpp' in names:
    record['llamacpp_over_stacked_vanilla_per_round'] = [a / b for a, b in zip(seconds['stacked-vanilla'],
                                                                                seconds['llamacpp'])]
Path(out).write_text(json.dumps(record, indent=1))
print(json.dumps({k: v for k, v in record.items() if 'median' in k or k in ('identical', 'tokens', 'rounds_whose_outputs_changed')}, indent=1))
