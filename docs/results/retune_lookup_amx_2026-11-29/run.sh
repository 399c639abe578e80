#!/bin/bash
# Re-tune profiles/cpu.yaml with the prompt-lookup branch in the search space (AMX Xeon, 2026-11-29).
# Traces are recorded again (the stored ones lack the branch); the cost tables of run 15's tune are reused.
set -e
cd "$(dirname "$0")/../../.."
OUT=docs/results/retune_lookup_amx_2026-11-29
F=int4/int8:dense16:bf16+int8
date
.venv/bin/cast-autotune collect --threads 2 --batch-size 1,2,4,8,16 --num-prompts 16 --max-new-tokens 48 \
    --lookup-depth 8 2>&1 | tail -2
date
.venv/bin/cast-autotune collect --threads 2 --batch-size 32 --num-prompts 32 --max-new-tokens 32 \
    --lookup-depth 8 2>&1 | tail -2
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 \
    --confirm-max-new-tokens 32 --live-rounds 3 --output profiles/cpu.yaml 2>&1 | grep -v "it/s\]$\|s/it\]$"
date
