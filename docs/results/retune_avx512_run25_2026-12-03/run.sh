#!/bin/bash
# Re-tune profiles/cpu-avx512.yaml with head run 25 on a 2-core AMD EPYC (family 25, model 17: AVX-512 +
# AVX512-BF16, no AMX), 2026-12-03. The shipped profile was tuned on a family-26 EPYC with head run 22; since then
# the head moved to run 25 (traces and draft tables are keyed by its digest) and every third tuning prompt is
# benchmark-length (2026-12-02_retune_amx_longgate.md). The cost tables now reach context 512 (4 buckets of 128):
# humaneval runs at 87-440 tokens, and the 2-bucket tables charged everything past 256 at 256.
# Stages as retune_avx512_2026-12-01/run.sh otherwise (the same three formats, trials, gate).
# Run from the repository root: bash docs/results/retune_avx512_run25_2026-12-03/run.sh [all|collect|profile|tune|bench]
set -o pipefail
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=docs/results/retune_avx512_run25_2026-12-03
D=$RETUNE_DIR
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4/int8+int8,int4/int8:dense16:bf16+int8,int4/int8:dense32:bf16+int8
step=${1:-all}
quiet() { grep -v "USDT\|it/s\]$\|s/it\]$"; }
if [ $step = collect ] || [ $step = all ]; then bash docs/results/retune_avx512_2026-12-01/run.sh collect; fi
if [ $step = profile ] || [ $step = all ]; then  # the 2026-12-01 flags, with 4 context buckets
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $F --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = tune ] || [ $step = all ]; then bash docs/results/retune_avx512_2026-12-01/run.sh tune; fi
if [ $step = bench ] || [ $step = all ]; then  # what the session's time allowed: B = 1 on both, B = 2 (the new bucket)
  for ds in mt_bench humaneval; do  # mt_bench ran 5 rounds with EAGLE-2's tree as well; humaneval 3 rounds without it
    m=vanilla,eagle2,eagle2-best,cast; r=5; if [ $ds = humaneval ]; then m=vanilla,eagle2-best,cast; r=3; fi
    .venv/bin/python tools/bench.py --methods $m --dataset datasets/$ds.jsonl --batch-size 1 --num-prompts 16 \
        --max-new-tokens 32 --rounds $r --threads 2 --profile $D/cpu-avx512.yaml --json $D/bench_b1_$ds.json \
        --markdown $D/bench_b1_$ds.md 2>&1 | quiet | tail -4
  done
  for ds in mt_bench humaneval; do
    .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 2 --num-prompts 16 \
        --max-new-tokens 32 --rounds 3 --threads 2 --profile $D/cpu-avx512.yaml --json $D/bench_b2_$ds.json \
        --markdown $D/bench_b2_$ds.md 2>&1 | quiet | tail -4
  done
fi
