#!/bin/bash
# Re-tune profiles/cpu.yaml with head run 23-lr (digest 7f0a3696ebfe) on an AMX Xeon (family 6, model 207), 2026-12-02.
# The shipped cpu.yaml was tuned on 2026-11-30 with head run 15 on another AMX Xeon (model 167). Same flags as
# retune_format3_amx_2026-12-01/run.sh: record format-3 traces with today's head, re-time the published format's
# tables on this machine, tune and gate every bucket live, then A/B the new profile against the shipped one and
# bench CAST against plain decoding on benchmark prompts (B = 1 with EAGLE-2's tree and the best static tree).
# Run from the repository root: bash docs/results/retune_amx_run23lr_2026-12-02/run.sh [collect|profile|tune|ab|bench]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/retune_amx_run23lr_2026-12-02
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4amx/int8amx:dense32:bf16+int8amx
step=${1:-all}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
if [ $step = collect ] || [ $step = all ]; then
date
.venv/bin/cast-autotune collect --threads 2 --batch-size 1,2,4,8,16 --num-prompts 16 --max-new-tokens 48 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee $D/collect.log
.venv/bin/cast-autotune collect --threads 2 --batch-size 32 --num-prompts 32 --max-new-tokens 32 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee -a $D/collect.log
date
fi
if [ $step = profile ] || [ $step = all ]; then
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $F --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 2 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = tune ] || [ $step = all ]; then
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 --confirm-sets 3 \
    --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu.yaml 2>&1 | quiet | tee $D/tune.log
date
fi
if [ $step = ab ]; then  # the shipped profile (head run 15, model 167) against today's, on benchmark prompts
cp profiles/cpu.yaml $D/cpu_shipped_2026-11-30.yaml
.venv/bin/python docs/results/retune_format3_amx_2026-12-01/ab_profiles.py mt_bench,humaneval 1,4,16 5 8 \
    $D/ab_profiles.json $D/cpu_shipped_2026-11-30.yaml $D/cpu.yaml 2>&1 | quiet | tee $D/ab_profiles.log
fi
if [ $step = bench ]; then  # CAST against plain, EAGLE-2's tree and the best static tree (B = 1), B = 2-16
RETUNE_DIR=$D bash docs/results/retune_avx512_2026-12-01/bench.sh ${2:-$D/cpu.yaml}
fi
