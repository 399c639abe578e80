#!/bin/bash
# Re-tune profiles/cpu.yaml (head run 25) with the tuning prompts that carry benchmark-length requests, AMX Xeon
# (family 6, model 207), 2026-12-02. The profile it replaces (kept as cpu_shipped_run25.yaml) was tuned hours
# earlier with the same head, stages and flags (retune_amx_run25_2026-12-02/run.sh), but its live gate's prompts
# ran 36-106 tokens and its B <= 8 tree then ran 0.97x plain on humaneval (87-291 tokens). Now every third tuning
# prompt is a pasted function or passage of 400-1300 characters: collect records them, the gate decodes them.
# The cost tables are that re-tune's (same head, machine and day), so there is no profile stage.
# Run from the repository root: bash docs/results/retune_amx_longgate_2026-12-02/run.sh [all|collect|tune|b8|bench|b32]
set -o pipefail
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=docs/results/retune_amx_longgate_2026-12-02
D=$RETUNE_DIR
step=${1:-all}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
for stage in collect tune; do
  if [ $step = $stage ] || [ $step = all ]; then bash docs/results/retune_format3_amx_2026-12-01/run.sh $stage; fi
done
if [ $step = b8 ] || [ $step = all ]; then  # the floor it was re-tuned for: B = 8, 16 prompts x 32 tokens, 7 rounds
  for ds in humaneval mt_bench; do
    .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 8 --num-prompts 16 \
        --max-new-tokens 32 --rounds 7 --threads 2 --profile $D/cpu.yaml --json $D/bench_b8_${ds}_7rounds.json \
        --markdown $D/bench_b8_${ds}_7rounds.md 2>&1 | quiet | tail -4
  done
fi
for stage in bench b32; do
  if [ $step = $stage ] || [ $step = all ]; then bash docs/results/retune_amx_run23lr_2026-12-02/run.sh $stage; fi
done
