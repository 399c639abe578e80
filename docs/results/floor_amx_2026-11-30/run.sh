#!/bin/bash
# The shipped profiles/cpu.yaml against plain decoding at B = 4-32, both benchmarks,
# 32 prompts x 32 new tokens, 7 interleaved rounds (docs/results/2026-11-30_floor_amx.md).
set -e
cd "$(dirname "$0")/../../.."
D=docs/results/floor_amx_2026-11-30
for ds in mt_bench humaneval; do
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl \
    --batch-size ${BATCHES:-4,8,16,32} --num-prompts 32 --max-new-tokens 32 --rounds 7 --threads 2 \
    --profile profiles/cpu.yaml --weight-format auto --json $D/bench_$ds.json 2>&1 | tee $D/bench_$ds.log
done
