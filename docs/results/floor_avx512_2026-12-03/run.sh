#!/usr/bin/env bash
# The floor of the shipped profiles/cpu-avx512.yaml at B = 4-32 on the benchmark prompts (32 prompts x 32
# tokens, CAST against plain decoding in 3 interleaved rounds; ~19 min on the family-25 EPYC), then a B = 1
# step's host work outside its forwards with the same profile (~2 min). From the repository root:
# bash docs/results/floor_avx512_2026-12-03/run.sh [bench|null|host]   (null: the first run's lowest and highest
# readings again, against a second plain engine in the same rounds)
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/floor_avx512_2026-12-03
step=${1:-all}
if [ $step = bench ] || [ $step = all ]; then
  for ds in mt_bench humaneval; do
    .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 4,8,16,32 \
        --num-prompts 32 --max-new-tokens 32 --rounds 3 --threads 2 --profile profiles/cpu-avx512.yaml \
        --json $D/bench_floor_$ds.json --markdown $D/bench_floor_$ds.md 2>&1 | grep -v "USDT\|it/s\]$\|s/it\]$" | tail -8
  done
fi
if [ $step = null ] || [ $step = all ]; then
  for case in mt_bench:16 humaneval:4; do
    .venv/bin/python tools/bench_resolution.py --profile profiles/cpu-avx512.yaml --dataset datasets/${case%:*}.jsonl \
        --batch-size ${case#*:} --num-prompts 32 --max-new-tokens 32 --rounds 6 --threads 2 \
        --json $D/resolution_${case%:*}_b${case#*:}.json 2>&1 | grep -v USDT
  done
fi
if [ $step = host ] || [ $step = all ]; then
  bash docs/results/host_work_avx512_2026-12-01/run.sh 2>&1 | tee $D/host_work.log
fi
