"""Target forward at B = 1 (and B = 4) over n new tokens at context 256, for several
weight formats, interleaved round by round (the profiler's timer), plus how far each
format's logits lie from the fp32 model's at 8 new tokens.
Usage: fwd_formats.py FORMATS(comma) NS(comma) ROUNDS OUT.json"""
import json, statistics, sys
sys.path.insert(0, '.')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from sglang_cast.engine.timing import ForwardTimer
from tools.benchkit.inputs import load_settings

formats, ns, rounds, out = sys.argv[1].split(','), [int(n) for n in sys.argv[2].split(',')], int(sys.argv[3]), sys.argv[4]
settings = load_settings('profiles/cpu.yaml', 'cpu').profile.settings
timers, pairs = {}, {}
for fmt in ['fp32'] + formats:
    pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
    r = pair.engine(make_policy('vanilla', settings), 4, 640).runner
    timer = ForwardTimer(None, r.target_cache, pair.target.config.vocab_size)
    timer.forward = lambda tokens, positions, cache_, slots, mask, r=r: r.target_forward(tokens, positions, slots, mask)
    timers[fmt], pairs[fmt] = timer, (pair, r)

# logits against fp32 over one real prompt + 8 new tokens (causal), per format
ids = pairs['fp32'][0].tokenizer.encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")[:40]
tokens = torch.tensor([ids])
positions = torch.arange(len(ids)).view(1, -1)
from sglang_cast.models.attention import causal_tree_mask
logits = {}
for fmt, (pair, r) in pairs.items():
    r.target_cache.reset(0)
    with torch.inference_mode():
        lg, _ = r.target_forward(tokens, positions, torch.tensor([0]), causal_tree_mask(1, len(ids), 'cpu'))
    logits[fmt] = lg[0, -8:].float()
    r.target_cache.reset(0)
ref = logits['fp32']
for fmt in formats:
    d = (logits[fmt] - ref).abs().max().item()
    agree = (logits[fmt].argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f'{fmt}: max |logit - fp32| over the last 8 positions {d:.3f}; argmax agrees {agree:.2f}', flush=True)

keys = [(b, n) for b in (1,) for n in ns] + [(4, n) for n in (1, 2, 4, 8)]
samples = {(fmt, k): [] for fmt in formats for k in keys}
for rnd in range(rounds):
    for k in keys:
        for fmt in formats:
            samples[(fmt, k)].append(timers[fmt].time(k[0], 256, k[1], warmup=1, repeats=3).median_ms)
    print('round', rnd, flush=True)
rows = []
for k in keys:
    meds = {fmt: statistics.median(samples[(fmt, k)]) for fmt in formats}
    base = meds[formats[0]]
    print(f'B={k[0]} n={k[1]:2d} ' + '  '.join(f'{fmt} {ms:6.2f} ms ({ms / base:.2f})' for fmt, ms in meds.items()))
    rows += [{'batch': k[0], 'n': k[1], 'format': fmt, 'median_ms': meds[fmt], 'samples': samples[(fmt, k)]}
             for fmt in formats]
json.dump(rows, open(out, 'w'), indent=1)
