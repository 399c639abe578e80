#!/usr/bin/env bash
# CAST with the shipped profiles/cpu-avx512.yaml against plain decoding at B = 8, 16, 32 (its plain buckets), 32
# prompts x 32 tokens, 5 interleaved rounds, mt_bench and humaneval (~7 min on a quiet 2-core EPYC).
# Usage (repository root, nothing else running): bash docs/results/floor_b32_2026-12-07/run.sh
set -euo pipefail
HERE=docs/results/floor_b32_2026-12-07
for ds in mt_bench humaneval; do
  .venv/bin/python tools/bench.py --methods vanilla,cast --profile profiles/cpu-avx512.yaml --dataset datasets/$ds.jsonl \
      --num-prompts 32 --max-new-tokens 32 --threads 2 --batch-size 8,16,32 --rounds 5 \
      --json $HERE/bench_$ds.json --markdown $HERE/bench_$ds.md 2>&1 | tr '\r' '\n' \
      | grep -v "it/s\]\|s/it\]\|run/s\|s/run" > $HERE/bench_$ds.log
done
