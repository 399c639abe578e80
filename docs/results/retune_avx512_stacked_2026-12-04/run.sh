#!/bin/bash
# Re-tune profiles/cpu-avx512.yaml after stacked linears (0936f98) on a 2-core AMD EPYC (family 25, model 17:
# AVX-512 + AVX512-BF16, no AMX), 2026-12-04. The shipped profile (retune_avx512_run25_2026-12-03) was profiled
# before q/k/v and gate/up ran as one linear each; a one-token forward is ~10 % cheaper now, a verify 1-3 %, so
# the tables over-charge plain steps more than speculative ones. Same recording, flags and gate as that re-tune,
# but two formats instead of three: that run measured int4/int8+int8 134.5 tok/s replayed, dense16 128.8 and
# dense32 116.4 (last in 4 of 6 buckets), and a session fits 50 minutes of profiling, not 75.
# Run from the repository root: bash docs/results/retune_avx512_stacked_2026-12-04/run.sh [all|collect|profile|tune|bench]
# and, run afterwards as the bench's readings asked for them: bench_old_b2, firm, firm_old
set -o pipefail
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=docs/results/retune_avx512_stacked_2026-12-04
D=$RETUNE_DIR
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4/int8+int8,int4/int8:dense16:bf16+int8
step=${1:-all}
quiet() { grep --line-buffered -v "USDT\|it/s\]$\|s/it\]$"; }
NEW=$D/cpu-avx512.yaml OLD=docs/results/retune_avx512_run25_2026-12-03/cpu-avx512.yaml  # re-tuned, replaced
# bench METHODS DATASET BATCH ROUNDS PROFILE NAME: 16 prompts x 32 tokens, greedy, records $D/NAME.{json,md}
bench() {
  .venv/bin/python tools/bench.py --methods $1 --dataset datasets/$2.jsonl --batch-size $3 --num-prompts 16 \
      --max-new-tokens 32 --rounds $4 --threads 2 --profile $5 --json $D/$6.json --markdown $D/$6.md 2>&1 | quiet | tail -4
}
if [ $step = collect ] || [ $step = all ]; then bash docs/results/retune_avx512_2026-12-01/run.sh collect; fi
if [ $step = profile ] || [ $step = all ]; then  # the run-25 re-tune's flags (4 context buckets to 512)
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $F --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = tune ] || [ $step = all ]; then  # the 2026-12-01 tune's flags, these two formats
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 \
    --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 --confirm-sets 3 \
    --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu-avx512.yaml 2>&1 | quiet | tee $D/tune.log
date
fi
if [ $step = bench ] || [ $step = all ]; then
  # B = 1: the re-tuned profile and the replaced (pre-stacking) one, each in its own process against plain decoding
  # in the same rounds, alternated per dataset; B = 2 with the re-tuned profile. eagle2-best: the best static tree
  # by replay on the same traces. EAGLE-2's own tree ran 0.28x at B = 1 on 2026-12-03 and is left out.
  for ds in mt_bench humaneval; do
    bench vanilla,eagle2-best,cast $ds 1 5 $NEW bench_b1_${ds}_new
    bench vanilla,cast $ds 1 5 $OLD bench_b1_${ds}_old
  done
  for ds in mt_bench humaneval; do bench vanilla,cast $ds 2 3 $NEW bench_b2_$ds; done
fi
if [ $step = bench_old_b2 ]; then  # B = 2 under the replaced profile, run right after `bench` (added once its B = 2 read 1.05x / 0.99x)
  for ds in mt_bench humaneval; do bench vanilla,cast $ds 2 3 $OLD bench_b2_${ds}_old; done
fi
if [ $step = firm ]; then  # more rounds where `bench` left the goal (mt_bench B = 1) and the floor (humaneval B = 2) at the edge
  bench vanilla,cast mt_bench 1 9 $NEW firm_b1_mt_bench
  bench vanilla,cast humaneval 2 7 $NEW firm_b2_humaneval
fi
if [ $step = firm_old ]; then bench vanilla,cast mt_bench 1 9 $OLD firm_b1_mt_bench_old; fi  # the replaced profile, right after `firm`
