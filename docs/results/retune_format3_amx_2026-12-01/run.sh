#!/bin/bash
# Re-tune profiles/cpu.yaml on format-3 traces (the recording commits through the lookup branch;
# docs/results/2026-11-30_replay_sampling_amx.md), AMX Xeon, 2026-12-01.
# tune: on the shipped profile's cost tables (amx_int8_head_2026-11-30/run.sh profile); its gate found
# the machine running the forwards 0.53-0.78x their tabled time, so: profile (re-timed, the same flags)
# and retune (the same tune on the new tables, into cpu_reprofiled.yaml).
# Run from the repository root: bash docs/results/retune_format3_amx_2026-12-01/run.sh [collect|tune|profile|retune|ab|ab2]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=${RETUNE_DIR:-docs/results/retune_format3_amx_2026-12-01}  # where logs and profiles go (a later re-tune names its own)
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4amx/int8amx:dense32:bf16+int8amx
step=${1:-all}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
if [ $step = collect ] || [ $step = all ]; then  # retune_lookup_amx_2026-11-29/run.sh's recording
date
.venv/bin/cast-autotune collect --threads 2 --batch-size 1,2,4,8,16 --num-prompts 16 --max-new-tokens 48 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee $D/collect.log
.venv/bin/cast-autotune collect --threads 2 --batch-size 32 --num-prompts 32 --max-new-tokens 32 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee -a $D/collect.log
date
fi
if [ $step = tune ] || [ $step = all ]; then  # amx_int8_head_2026-11-30/run.sh's tune, the published format only
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 --confirm-sets 3 \
    --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu.yaml 2>&1 | quiet | tee $D/tune.log
date
fi
if [ $step = profile ] || [ $step = all ]; then  # amx_int8_head_2026-11-30/run.sh's profile, the published format only
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $F --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 2 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = retune ] || [ $step = all ]; then  # the tune above on the re-timed tables
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 --confirm-sets 3 \
    --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu_reprofiled.yaml 2>&1 | quiet | tee $D/retune.log
date
fi
if [ $step = ab ]; then  # the shipped profile against both re-tunes on benchmark prompts
.venv/bin/python $D/ab_profiles.py mt_bench,humaneval 1,2,8 5 8 $D/ab_profiles.json $D/cpu_shipped_2026-11-30.yaml \
    $D/cpu.yaml $D/cpu_reprofiled.yaml 2>&1 | quiet | tee $D/ab_profiles.log
fi
if [ $step = ab2 ]; then  # B = 2 on mt_bench again, 16 prompts x 7 rounds
.venv/bin/python $D/ab_profiles.py mt_bench 2 7 16 $D/ab_mt_bench_b2.json $D/cpu_shipped_2026-11-30.yaml \
    $D/cpu_reprofiled.yaml 2>&1 | quiet | tee $D/ab_mt_bench_b2.log
fi
