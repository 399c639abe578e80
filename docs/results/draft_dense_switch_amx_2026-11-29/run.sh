#!/bin/bash
# Profile and tune the draft dense switch format (AMX Xeon, 2026-11-29): the target part as profiles/cpu.yaml, the draft head int8 below 8 rows, bf16 from 8.
set -o pipefail
cd /work/main
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4/int8:dense16:bf16+int8:dense8:bf16
step=${1:-all}
if [ $step = profile ] || [ $step = all ]; then
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $F --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 2 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB
fi
if [ $step = tune ] || [ $step = all ]; then
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 --max-traces 40 \
    --top-k 8 --max-depth 6 --max-tokens 32 --confirm-prompts 16 --confirm-max-new-tokens 32 --live-rounds 3 \
    --db $DB --output ${OUTPUT:-/tmp/cpu_switch.yaml} 2>&1 | grep -v "it/s\]$\|s/it\]$"
fi
