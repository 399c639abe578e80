"""Whole target forwards (`ForwardTimer`, causal chains of n tokens after ctx) under the CPU's
attention rule before 2026-11-30 (three kernels below 64 grouped rows, `kernels3`) and since
(the fused masked SDPA kernel, `sdpa`), interleaved round by round.

    .venv/bin/python docs/results/sdpa_cpu_2026-11-30/sdpa_ab2.py "int4/int8:dense16:bf16+int8" 6
"""
import sys, statistics
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
import sglang_cast.models.attention as A
from rules import FUSED, kernels3  # this folder

fmt = sys.argv[1]; rounds = int(sys.argv[2])
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
eng = pair.engine(make_policy('vanilla', load_settings('profiles/cpu.yaml', 'cpu').profile.settings), 16, 1024)
r = eng.runner
timer = ForwardTimer(None, r.target_cache, pair.target.config.vocab_size)
timer.forward = lambda tokens, positions, cache_, slots, mask: r.target_forward(tokens, positions, slots, mask)
keys = [(b, ctx, n) for b in (1, 4, 16) for ctx in (100, 300) for n in ((2, 3, 4, 8) if b == 1 else (1, 2, 4))]
S = {}
for rnd in range(rounds):
    for key in keys:
        for k, rule in (('kernels3', kernels3), ('sdpa', FUSED)):
            A.grouped_attention = rule
            # n = 1: every row at the same context attends unmasked under both rules (a control)
            S.setdefault((k, key), []).append(timer.time(*key, warmup=1, repeats=3).median_ms)
    print("round", rnd, flush=True)
for key in keys:
    a, b_ = S[('kernels3', key)], S[('sdpa', key)]
    ratios = [y / x for x, y in zip(a, b_)]
    print(f"B={key[0]:2d} ctx {key[1]} n={key[2]}: kernels3 {statistics.median(a):7.2f}  sdpa {statistics.median(b_):7.2f} ms  per-round sdpa/kernels3 {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)
