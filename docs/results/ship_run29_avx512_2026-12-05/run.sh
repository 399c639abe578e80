#!/bin/bash
# Ship head run 29 (docs/results/2026-12-05_run29_lm_head_basis_avx512.md) with a profile re-tuned on its traces, on a
# 2-core AMD EPYC (family 25, model 17: AVX-512 + AVX512-VNNI + AVX512-BF16, no AMX), 2026-12-05. Same steps and flags
# as ship_run27_avx512_2026-12-05/run.sh: `collect` records run 29's traces (the tuner replays only traces of the head
# it is shipped with); `profile` times both draft-head formats together (tables are keyed by the head's digest);
# `tune` is the joint tune; `ab` runs the publication against the shipped profile (tuned with run 27's head), both
# with run 29's head; `bench` the shipped pair against plain decoding at B 1-16.
# Run from the repository root: bash docs/results/ship_run29_avx512_2026-12-05/run.sh [collect|profile|tune|ab|bench]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/ship_run29_avx512_2026-12-05
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
FORMATS=int4vnni/int8vnni+int8vnni,int4vnni/int8vnni+int8
step=${1:-collect}
quiet() { tr "\r" "\n" | grep -v "USDT\|it/s\]$\|s/it\]$\|run/s[],]\|s/run[],]\|^\s*$"; }  # progress bars dropped
NEW=$D/cpu-avx512.yaml OLD=profiles/cpu-avx512.yaml
if [ $step = collect ]; then  # fp32 traces of the shipped head: B 1-16 on 16 prompts, B 32 on 32
date
.venv/bin/cast-autotune collect --threads 2 --batch-size 1,2,4,8,16 --num-prompts 16 --max-new-tokens 48 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee $D/collect.log
.venv/bin/cast-autotune collect --threads 2 --batch-size 32 --num-prompts 32 --max-new-tokens 32 \
    --lookup-depth 8 --quiet --db $DB 2>&1 | quiet | tee -a $D/collect.log
date
fi
if [ $step = profile ]; then  # retune_avx512_interleaved_2026-12-04's flags
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $FORMATS --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = tune ]; then
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $FORMATS --buckets 1,2,4,8,16,32 \
    --trials 60 --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 \
    --confirm-sets 3 --confirm-max-new-tokens 32 --live-rounds 3 --live-min-speedup 1.15 --db $DB \
    --output $NEW 2>&1 | quiet | tee $D/tune.log
date
fi
if [ $step = ab ]; then  # the new publication against the shipped profile (before it was replaced), B 1-2, 16 x 32, 5 rounds
  .venv/bin/python docs/results/retune_avx512_fused_2026-12-04/ab_profiles.py $OLD $NEW mt_bench,humaneval 1,2 5 16 \
      $D/ab_profiles.json 2>&1 | quiet | tee $D/ab_profiles.log
fi
if [ $step = bench ]; then  # after the copy into profiles/: the shipped pair against plain decoding, B 1-16, one run a dataset
  for ds in mt_bench humaneval; do
    .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 1,2,4,8,16 \
        --num-prompts 16 --max-new-tokens 32 --rounds 3 --threads 2 --profile $OLD --json $D/bench_$ds.json \
        --markdown $D/bench_$ds.md 2>&1 | quiet | tail -12
  done
fi
