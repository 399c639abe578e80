#!/bin/bash
# The int8amx record (AMX Xeon, 2026-11-30), in order: forward widths, profile both formats
# back to back, tune both on the same traces.
# Run from the repository root: bash docs/results/amx_int8_head_2026-11-30/run.sh [fwd|profile|tune]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/amx_int8_head_2026-11-30
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
OLD=int4/int8:dense16:bf16+int8
NEW=int4amx/int8amx:dense32:bf16+int8amx
step=${1:-all}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
if [ $step = fwd ] || [ $step = all ]; then
.venv/bin/python docs/results/int4_tiles_2026-11-30/fwd_formats.py "int4/int8:dense16:bf16,int4amx/int8:dense32:bf16,int4amx/int8amx:dense32:bf16" \
    1,2,4,5,6,8,12,16,24 4 $D/fwd_formats.json 2>&1 | quiet | tee $D/fwd_formats.log
fi
if [ $step = profile ] || [ $step = all ]; then  # the shipped profile's flags (verify_width_amx_2026-11-29/run.sh)
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $OLD,$NEW --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 2 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
fi
if [ $step = tune ] || [ $step = all ]; then  # gate_sets_2026-11-30/tune.sh's flags, both formats
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $OLD,$NEW --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --confirm-prompts 16 --confirm-sets 3 \
    --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu_tiles.yaml 2>&1 | quiet | tee $D/tune.log
fi
