"""One layer's sibling linears apart against stacked along outputs, per packed format and row
count: q/k/v (576 → 576 + 192 + 192) and gate/up (576 → 1536 + 1536), the embedded model's
layer-0 weights, 2 threads.  Each (group, format, rows, layout) is timed in round-robin rounds
(a round calls each variant `CALLS` times back to back); the median per call over rounds.

Usage (repository root): .venv/bin/python docs/results/stacked_linears_2026-12-04/linears_ab.py ROUNDS JSON"""
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from sglang_cast.hardware import cpu_name, isa_class  # noqa: E402
from sglang_cast.models import load_target  # noqa: E402
from sglang_cast.models.weights import Format, pack_linear  # noqa: E402

rounds, out = int(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(2)
CALLS, ROWS, FORMATS = 20, (1, 6, 17), (Format.INT4, Format.INT8)
layer = load_target(None, "cpu", torch.float32)[0].layers[0]
GROUPS = {"qkv": [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj],
          "gate_up": [layer.mlp.gate_proj, layer.mlp.up_proj]}

variants = {}  # "group:format:rows:layout" -> (callable, input)
for group, linears in GROUPS.items():
    for fmt in FORMATS:
        apart = [pack_linear(fmt, lin.weight.detach(), None) for lin in linears]
        stacked = pack_linear(fmt, torch.cat([lin.weight.detach() for lin in linears]), None)
        for rows in ROWS:
            x = torch.randn(rows, linears[0].in_features)
            variants[f"{group}:{fmt.value}:{rows}:apart"] = (lambda x, a=apart: [m(x) for m in a], x)
            variants[f"{group}:{fmt.value}:{rows}:stacked"] = (lambda x, s=stacked: s(x), x)

times = {key: [] for key in variants}
with torch.inference_mode():
    for r in range(rounds + 2):  # two warm-up rounds
        for key, (call, x) in variants.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                call(x)
            if r >= 2:
                times[key].append((time.perf_counter() - start) / CALLS * 1e6)
us = {key: statistics.median(v) for key, v in times.items()}
record = {"cpu": cpu_name(), "isa_class": isa_class(), "threads": 2, "rounds": rounds, "calls": CALLS,
          "median_us": us}
for key in us:
    if key.endswith(":apart"):
        base = key[:-len(":apart")]
        a, s = us[key], us[base + ":stacked"]
        print(f"{base:18} apart {a:7.1f} us, stacked {s:7.1f} us, saved {a - s:6.1f} us ({a / s:.2f}x)")
out.write_text(json.dumps(record, indent=1))
