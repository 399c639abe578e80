#!/bin/bash
# CAST under the re-tuned profile against plain decoding on benchmark prompts (16 x 32 tokens each), on the
# machine it was tuned on: B = 1 with EAGLE-2's default tree and the best static tree as anchors (5 rounds),
# then B = 2-16 (3 rounds); every method interleaved round by round in one process.
# Run from the repository root: bash docs/results/retune_avx512_2026-12-01/bench.sh [PROFILE]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=${RETUNE_DIR:-docs/results/retune_avx512_2026-12-01}  # where logs, profile and bench records go
P=${1:-$D/cpu-avx512.yaml}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
for ds in mt_bench humaneval; do
date
.venv/bin/python tools/bench.py --methods vanilla,eagle2,eagle2-best,cast --dataset datasets/$ds.jsonl --batch-size 1 \
    --num-prompts 16 --max-new-tokens 32 --rounds 5 --threads 2 --profile $P --json $D/bench_b1_$ds.json \
    --markdown $D/bench_b1_$ds.md 2>&1 | quiet | tail -4
.venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 2,4,8,16 \
    --num-prompts 16 --max-new-tokens 32 --rounds 3 --threads 2 --profile $P --json $D/bench_b2-16_$ds.json \
    --markdown $D/bench_b2-16_$ds.md 2>&1 | quiet | tail -4
done
date
