"""Target forward at B = 1 over new tokens n and context c, interleaved, against
profiles/cpu.yaml's table (same timer the profiler uses).  Also prints the benchmark
prompts' lengths, so the contexts probed are the ones decoding sees."""
import json, statistics, sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings

profile = load_settings('profiles/cpu.yaml', 'cpu').profile
costs = profile.settings.costs
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=str(profile.weight_format))
for name in ('mt_bench', 'humaneval'):
    texts = [json.loads(l)['turns'][0] for l in open(f'datasets/{name}.jsonl')][:16]
    lens = sorted(len(pair.tokenizer.encode(pair.format_prompt(t))) for t in texts)
    print(name, 'first 16 prompt lengths', lens, flush=True)
eng = pair.engine(make_policy('vanilla', profile.settings), 1, 640)
r = eng.runner
timer = ForwardTimer(None, r.target_cache, pair.target.config.vocab_size)
timer.forward = lambda tokens, positions, cache_, slots, mask: r.target_forward(tokens, positions, slots, mask)
contexts = [int(c) for c in sys.argv[1].split(',')] if len(sys.argv) > 1 else [128, 256, 384, 512]
ns = [int(n) for n in sys.argv[2].split(',')] if len(sys.argv) > 2 else [1, 2, 3, 4, 5, 6, 8, 11]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 6
samples = {(c, n): [] for c in contexts for n in ns}
for rnd in range(rounds):
    for key in samples:
        samples[key].append(timer.time(1, key[0], key[1], warmup=1, repeats=3).median_ms)
    print('round', rnd, flush=True)
rows = []
for c in contexts:
    line = [f'c={c:4d}']
    for n in ns:
        med = statistics.median(samples[(c, n)])
        line.append(f'n{n}: {med:6.2f} ({costs.target(1, c, n):5.2f})')
        rows.append({'context': c, 'n': n, 'median_ms': med, 'samples': samples[(c, n)],
                     'table_ms': costs.target(1, c, n)})
    print('  '.join(line))
json.dump(rows, open(sys.argv[4] if len(sys.argv) > 4 else '/tmp/fwd_grid.json', 'w'), indent=1)
