"""B = 1 decodes to sample with py-spy: the shipped profiles/cpu-avx512.yaml, 8 humaneval prompts x 32 tokens,
ROUNDS times.  Usage (repository root):
  .venv/bin/py-spy record --nonblocking -r 1000 -f raw -o cast.raw -- .venv/bin/python decode_loop.py cast 6"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs/results/host_path_b1_2026-11-29"))
sys.path.insert(0, str(ROOT))
from setup_b1 import setup  # noqa: E402

policy, rounds = sys.argv[1], int(sys.argv[2])
run = setup("profiles/cpu-avx512.yaml", "datasets/humaneval.jsonl", 8, 2)
engine = run.engine(policy)
for _ in range(rounds):
    engine.generate(run.texts, run.params)
