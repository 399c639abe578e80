#!/bin/bash
# The SGLang-tuned profile's trees on the native engine (fp32): tokens per step on the
# tuning prompts (autotune/prompts.txt, as the traces) against mt_bench's first turns.
cd "$(dirname "$0")/../../../.."
D=docs/results/sglang_cpu/2026-11-30_amx
for ds in autotune/prompts.txt datasets/mt_bench.jsonl; do
  n=$(basename $ds | cut -d. -f1)
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset $ds --batch-size 1,4 --num-prompts 8 \
    --max-new-tokens 64 --rounds 3 --threads 2 --dtype float32 --weight-format fp32 \
    --profile $D/cpu.yaml --json $D/native_tau_$n.json > $D/native_tau_$n.log 2>&1
done
