#!/usr/bin/env bash
# The plain bucket that read below the floor in the ship's 3-round bench (humaneval B = 8, 0.94x), and its
# neighbours (humaneval B = 4, 16; mt_bench B = 8), re-measured paired: the shipped profiles/cpu-avx512.yaml (version c8d8f43eab5b) against plain decoding, one batch of B prompts x
# 32 tokens per decode, 30 interleaved rounds (each round's two decodes back to back), then the 2026-12-07 family-25
# floor run's ci.py (median paired ratio, distribution-free 95 % interval). Repository root, nothing else running:
#   bash docs/results/floor_b8_f26_2026-12-07/run.sh
set -euo pipefail
HERE=docs/results/floor_b8_f26_2026-12-07
for run in humaneval:8 humaneval:4 humaneval:16 mt_bench:8; do
  ds=${run%:*} b=${run#*:}
  [ -f $HERE/bench_${ds}_b$b.json ] && continue  # resumable: a finished bucket is kept
  .venv/bin/python tools/bench.py --methods vanilla,cast --profile profiles/cpu-avx512.yaml \
      --dataset datasets/$ds.jsonl --num-prompts $b --max-new-tokens 32 --threads 2 --batch-size $b --rounds 30 \
      --json $HERE/bench_${ds}_b$b.json 2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]\|run/s\|s/run" > $HERE/bench_${ds}_b$b.log
done
.venv/bin/python docs/results/floor_paired_2026-12-07/ci.py $HERE/bench_*_b*.json | tee $HERE/ci.log
