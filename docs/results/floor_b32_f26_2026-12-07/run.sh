#!/usr/bin/env bash
# The floor's buckets not yet measured on the family-26 EPYC (mt_bench B 4, 16, 32; humaneval B 32), with the
# profiles/cpu-avx512.yaml shipped with the soup of runs 41 and 42, paired against plain decoding: one batch of B
# prompts x 32 tokens per decode, 30 interleaved rounds (each round's two decodes back to back), then the family-25
# floor run's ci.py (median paired ratio, distribution-free 95 % interval). Repository root, nothing else running:
#   bash docs/results/floor_b32_f26_2026-12-07/run.sh
set -euo pipefail
HERE=docs/results/floor_b32_f26_2026-12-07
for run in mt_bench:4 mt_bench:16 mt_bench:32 humaneval:32; do
  ds=${run%:*} b=${run#*:}
  [ -f $HERE/bench_${ds}_b$b.json ] && continue  # resumable: a finished bucket is kept
  .venv/bin/python tools/bench.py --methods vanilla,cast --profile profiles/cpu-avx512.yaml \
      --dataset datasets/$ds.jsonl --num-prompts $b --max-new-tokens 32 --threads 2 --batch-size $b --rounds 30 \
      --json $HERE/bench_${ds}_b$b.json 2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]\|run/s\|s/run" > $HERE/bench_${ds}_b$b.log
done
.venv/bin/python docs/results/floor_paired_2026-12-07/ci.py $HERE/bench_*_b*.json | tee $HERE/ci.log
