#!/bin/bash
# B = 32 on benchmark prompts (32 prompts x 32 tokens, 3 rounds, CAST and plain interleaved in one process), the
# bucket bench.sh leaves out: issue 48's floor (never below 0.98x plain at B <= 32). Run after bench.sh, from the
# repository root: bash docs/results/retune_avx512_run22_2026-12-01/bench_b32.sh [PROFILE]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=${RETUNE_DIR:-docs/results/retune_avx512_run22_2026-12-01}  # where the records go (a later re-tune names its own)
P=${1:-$D/cpu-avx512.yaml}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
for ds in mt_bench humaneval; do
date
.venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 32 \
    --num-prompts 32 --max-new-tokens 32 --rounds 3 --threads 2 --profile $P --json $D/bench_b32_$ds.json \
    --markdown $D/bench_b32_$ds.md 2>&1 | quiet | tail -4
done
date
