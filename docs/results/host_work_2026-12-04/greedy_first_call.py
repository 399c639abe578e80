"""The runner's greedy read inside B = 1 decodes: its first call on an iteration's logits (right after the
verify forward), the same call again at once, and a one-element slice copy made just before the first call.
Usage (repository root): greedy_first_call.py POLICY"""
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs/results/host_path_b1_2026-11-29"))
sys.path.insert(0, str(ROOT))
from setup_b1 import setup  # noqa: E402

policy = sys.argv[1]
run = setup("profiles/cpu-avx512.yaml", "datasets/humaneval.jsonl", 4, 2)
engine = run.engine(policy)
runner = engine.runner
read = runner.greedy_tokens
tiny, first, again, rows = [], [], [], []


def timed(logits):
    started = time.perf_counter()
    logits[..., :1].clone()
    tiny.append((time.perf_counter() - started) * 1e6)
    started = time.perf_counter()
    tokens = read(logits)
    first.append((time.perf_counter() - started) * 1e6)
    started = time.perf_counter()
    read(logits)
    again.append((time.perf_counter() - started) * 1e6)
    rows.append(logits.numel() // logits.shape[-1])
    return tokens


runner.greedy_tokens = timed
engine.generate(run.texts, run.params)
print(f"{policy} ({getattr(read, '__module__', '')}.{getattr(read, '__name__', read)}): median rows {statistics.median(rows)}; us, medians: "
      f"slice copy first {statistics.median(tiny):.1f}, greedy read then {statistics.median(first):.1f}, "
      f"again at once {statistics.median(again):.1f}")
