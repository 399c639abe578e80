#!/usr/bin/env bash
# The floor at B = 8, 16, 32 resolved finer than 5 rounds: CAST with the shipped profiles/cpu-avx512.yaml (plain
# buckets above B = 2) against plain decoding, one batch of B prompts x 32 tokens per decode, 50 interleaved rounds
# per batch size (each round's two decodes run back to back, so their ratio is paired), mt_bench and humaneval;
# then ci.py: the median paired ratio with its distribution-free 95 % interval (~15 min on a quiet 2-core EPYC).
# Usage (repository root, nothing else running): bash docs/results/floor_paired_2026-12-07/run.sh
set -euo pipefail
HERE=docs/results/floor_paired_2026-12-07
for ds in mt_bench humaneval; do
  for b in 8 16 32; do
    .venv/bin/python tools/bench.py --methods vanilla,cast --profile profiles/cpu-avx512.yaml \
        --dataset datasets/$ds.jsonl --num-prompts $b --max-new-tokens 32 --threads 2 --batch-size $b --rounds 50 \
        --json $HERE/bench_${ds}_b$b.json 2>&1 | tr '\r' '\n' \
        | grep -v "it/s\]\|s/it\]\|run/s\|s/run" > $HERE/bench_${ds}_b$b.log
  done
done
.venv/bin/python $HERE/ci.py $HERE/bench_*_b*.json | tee $HERE/ci.log
