"""Where a B = 1 iteration's host work goes, stage by stage: each `StageClock` stage of
`SpeculativeRunner.iterate` (set-up, draft, verify + accept + target commit, the draft's
catch-up, appending the tokens) minus the target and draft forwards run inside it, in ms,
medians over every iteration of ROUNDS decodes of PROMPTS prompts x 32 tokens.
The last line is the medians as JSON (ab_checkouts.py reads it).
Usage (repository root): stages.py POLICY ROUNDS [DATASET] [PROMPTS]"""
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs/results/host_path_b1_2026-11-29"))
sys.path.insert(0, str(ROOT))
from setup_b1 import setup  # noqa: E402

from sglang_cast.engine import timing  # noqa: E402
from sglang_cast.engine.runner import SpeculativeRunner  # noqa: E402

policy, rounds = sys.argv[1], int(sys.argv[2])
dataset = sys.argv[3] if len(sys.argv) > 3 else "datasets/humaneval.jsonl"
prompts = int(sys.argv[4]) if len(sys.argv) > 4 else 8
run = setup("profiles/cpu-avx512.yaml", dataset, prompts, 2)
engine = run.engine(policy)

forwards: list[float] = []  # ms inside forwards since the last stage mark


def timed(method):
    def wrapper(self, *a, **k):
        t = time.perf_counter()
        try:
            return method(self, *a, **k)
        finally:
            forwards[-1] += (time.perf_counter() - t) * 1e3
    return wrapper


SpeculativeRunner.target_forward = timed(SpeculativeRunner.target_forward)
SpeculativeRunner.draft_forward = timed(SpeculativeRunner.draft_forward)
Clock = timing.StageClock
mark, read = Clock.mark, Clock.read
rows: list[list[float]] = []


def counting_mark(self):
    mark(self)
    forwards.append(0.0)


def outside_read(self):
    stages = read(self)
    rows.append([s - f for s, f in zip(stages, forwards[-len(stages) - 1:-1])])
    forwards.clear()
    forwards.append(0.0)
    return stages


Clock.mark, Clock.read = counting_mark, outside_read
forwards.append(0.0)
names = ["set-up", "draft", "verify", "catch-up", "append"]
for _ in range(rounds):
    engine.generate(run.texts, run.params)
print(f"{policy} {Path(dataset).stem} x{prompts}, {rounds} rounds, {len(rows)} iterations; "
      "ms outside forwards per stage, median (p25-p75):")
medians = {}
for i, name in enumerate(names + ["total"]):
    values = [sum(r) for r in rows] if name == "total" else [r[i] for r in rows]
    q = statistics.quantiles(values, n=4)
    medians[name] = statistics.median(values)
    print(f"  {name:9s} {medians[name]:.3f} ({q[0]:.3f}-{q[2]:.3f})")
print(json.dumps(medians))
