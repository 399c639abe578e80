"""The target forward f_T(B, c, n) timed, interleaved, beyond the tables' last context bucket (256): what a
charge clamped at 256 leaves out for the long tuning prompts (contexts up to ~440).
Run from the repository root: .venv/bin/python docs/results/retune_amx_longgate_2026-12-02/context_sweep.py"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from autotune.models import load_model_pair  # noqa: E402
from autotune.profiler import forward_timer  # noqa: E402

torch.set_num_threads(2)
FORMAT = "int4amx/int8amx:dense32:bf16+int8amx"  # profiles/cpu.yaml's
pair = load_model_pair(None, None, "cpu", "float32", weight_format=FORMAT)
POINTS = [(b, c, n) for b in (1, 8) for c in (127, 255, 447) for n in (1, 6)]
ROUNDS = 9  # every point once a round, so a slow minute of this shared machine hits them all alike
timers = {b: forward_timer(pair, "target", b, 520) for b in (1, 8)}
times = {point: [] for point in POINTS}
for _ in range(ROUNDS):
    for b, c, n in POINTS:
        times[(b, c, n)].append(timers[b].time(b, c, n, warmup=1, repeats=3).median_ms)
rows = []
for (b, c, n), ms in times.items():
    ms = sorted(ms)
    rows.append({"batch": b, "context": c, "n": n, "median_ms": round(ms[len(ms) // 2], 2),
                 "min_ms": round(ms[0], 2), "max_ms": round(ms[-1], 2)})
    print(rows[-1], flush=True)
out = Path(__file__).with_name("context_sweep.json")
out.write_text(json.dumps({"format": FORMAT, "rounds": ROUNDS, "rows": rows}, indent=1) + "\n")
