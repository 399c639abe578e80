"""Per-round CAST / plain ratios and the time outside the decode steps (admission), from
the bench records next to this file:  python outside_steps_and_ratios.py"""
import json
import statistics
from pathlib import Path

here = Path(__file__).parent
for ds in ("mt_bench", "humaneval"):
    records = json.loads((here / f"{ds}.json").read_text())["records"]
    for r in records:
        steps_s = r["iterations"] * r["step_ms"] / 1e3
        rounds = r["speedup_vs_vanilla_rounds"]
        print(f"{ds:9} B={r['batch_size']:<2} {r['method']:11} tau {r['tau']:.2f}  per-round ratio median "
              f"{statistics.median(rounds):.2f} [{min(rounds):.2f}-{max(rounds):.2f}]  step {r['step_ms']:.1f} ms  "
              f"workload {r['seconds']:.2f} s = steps {steps_s:.2f} + outside {r['seconds'] - steps_s:.2f}")
