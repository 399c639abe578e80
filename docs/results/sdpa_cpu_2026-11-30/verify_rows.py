"""Where a verify forward of 2 tokens costs more than plain decoding's 1-token forward, under one
attention rule (`kernels3`: the CPU's rule before 2026-11-30; `fused`: since): target forwards of
n = 1..4 tokens after a 200-token context at B = 1, wall ms interleaved (40 rounds), then the
operator table of 20 forwards at n = 1 and n = 2 (torch profiler, self ms per forward).

    .venv/bin/python docs/results/sdpa_cpu_2026-11-30/verify_rows.py kernels3|fused
"""
import collections, statistics, sys, time
sys.path.insert(0, '/work/main')
import torch
from torch.profiler import ProfilerActivity, profile
from sglang_cast.engine import EngineArgs, build_engine
from sglang_cast.profile import load_profile
import sglang_cast.models.attention as A
from rules import FUSED, kernels3  # this folder

torch.set_num_threads(2)
A.grouped_attention = {"kernels3": kernels3, "fused": FUSED}[sys.argv[1]]
loaded = load_profile('/work/main/profiles/cpu.yaml')
runner = build_engine(EngineArgs(policy="vanilla", settings=loaded.profile.settings, profile=loaded.profile,
                                 max_batch_size=1)).runner
CONTEXT, slots = 200, torch.tensor([0])
runner.target_cache.lens[0] = CONTEXT  # as if 200 tokens were committed (their K/V is whatever the cache holds)


def forward(n):
    tokens = torch.randint(0, 1000, (1, n))
    positions = (CONTEXT + torch.arange(n)).view(1, n)
    with torch.inference_mode():
        logits, _ = runner.target_forward(tokens, positions, slots, A.causal_tree_mask(1, n, 'cpu'))
    logits.argmax(-1).tolist()


for n in (1, 2, 3, 4):
    for _ in range(5):
        forward(n)
times = collections.defaultdict(list)
for _ in range(40):
    for n in (1, 2, 3, 4):
        start = time.perf_counter()
        forward(n)
        times[n].append((time.perf_counter() - start) * 1e3)
for n, v in times.items():
    v = sorted(v)
    print(f"n={n}: median {statistics.median(v):.2f} ms, p10 {v[4]:.2f}, p90 {v[35]:.2f}")
tables = {}
for n in (1, 2):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            forward(n)
    tables[n] = {e.key: (e.self_cpu_time_total / 20 / 1000, e.count / 20) for e in prof.key_averages()}
    print(f"n={n}: {sum(c for _, c in tables[n].values()):.0f} operator calls per forward")
attention_ops = ("aten::bmm", "aten::matmul", "aten::_softmax", "aten::softmax",
                 "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention")
for n in (1, 2):
    ms = sum(tables[n].get(op, (0, 0))[0] for op in attention_ops)
    print(f"n={n}: attention operators ({', '.join(attention_ops)}) {ms:.3f} ms self per forward")
print("operator | n=1 ms, calls | n=2 ms, calls  (by n=2's excess)")
names = sorted(set(tables[1]) | set(tables[2]), key=lambda k: -(tables[2].get(k, (0, 0))[0] - tables[1].get(k, (0, 0))[0]))
for name in names[:20]:
    a, b = tables[1].get(name, (0, 0)), tables[2].get(name, (0, 0))
    print(f"{name:52s} {a[0]:.3f} {a[1]:6.1f} | {b[0]:.3f} {b[1]:6.1f}")
