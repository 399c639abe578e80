#!/bin/bash
# Re-tune profiles/cpu-avx512.yaml with today's head, cost model and format-3 traces on a 2-core AMD EPYC
# (family 26, AVX-512 + AVX512-BF16, no AMX), 2026-12-01. The 2026-11-25 profile (head run 10) decodes plainly
# at every B. Three formats profiled back to back (the int8 head, and bf16 dense large forwards at 16 or 32
# tokens), tuned on the same traces, the fastest gated live and published.
# Run from the repository root: bash docs/results/retune_avx512_2026-12-01/run.sh [collect|profile|tune|bench]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=${RETUNE_DIR:-docs/results/retune_avx512_2026-12-01}  # where logs, profile and bench records go
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4/int8+int8,int4/int8:dense16:bf16+int8,int4/int8:dense32:bf16+int8
step=${1:-all}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
if [ $step = collect ] || [ $step = all ]; then  # retune_format3_amx_2026-12-01/run.sh's recording
date
.venv/bin/cast-autotune collect --threads 2 --batch-size 1,2,4,8,16 --num-prompts 16 --max-new-tokens 48 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee $D/collect.log
.venv/bin/cast-autotune collect --threads 2 --batch-size 32 --num-prompts 32 --max-new-tokens 32 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee -a $D/collect.log
date
fi
if [ $step = profile ] || [ $step = all ]; then  # the AMX profile's flags
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $F --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 2 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = tune ] || [ $step = all ]; then  # the AMX tune's flags, every profiled format
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 --confirm-sets 3 \
    --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu-avx512.yaml 2>&1 | quiet | tee $D/tune.log
date
fi
