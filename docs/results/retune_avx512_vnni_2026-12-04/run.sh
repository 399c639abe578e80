#!/bin/bash
# Re-tune profiles/cpu-avx512.yaml with the int4vnni/int8vnni target format (a1c1f6b) on a 2-core AMD EPYC
# (family 25, model 17: AVX-512 + AVX512-VNNI + AVX512-BF16, no AMX), 2026-12-04. Its forwards cost 0.64-0.90x
# int4/int8's at 1-32 rows (docs/results/2026-12-04_vnni_kernels_avx512.md), so wider verifies become cheaper.
# The shipped profile (retune_avx512_stacked_2026-12-04, int4/int8+int8) was profiled this morning on this VM: its
# tables stay in the database, so only the new format is profiled and both are tuned on the same traces (the
# stacked re-tune's recording, flags and gate). The draft head stays int8 on torch's kernel (+int8): int8vnni
# drafts at 1.08x / 0.99x / 0.81x / 0.76x its time at 1 / 4 / 8 / 16 rows and would change what the head proposes.
# Run from the repository root: bash docs/results/retune_avx512_vnni_2026-12-04/run.sh [profile|tune|bench|firm|floor]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/retune_avx512_vnni_2026-12-04
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
NEWF=int4vnni/int8vnni+int8
step=${1:-profile}
quiet() { tr "\r" "\n" | grep -v "USDT\|it/s\]$\|s/it\]$\|run/s[],]\|s/run[],]\|^\s*$"; }  # progress bars dropped
NEW=$D/cpu-avx512.yaml OLD=docs/results/retune_avx512_stacked_2026-12-04/cpu-avx512.yaml  # re-tuned, shipped before
if [ $step = profile ]; then  # the stacked re-tune's flags, the new format only
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $NEWF --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile.log
date
fi
if [ $step = tune ]; then  # both formats on the same traces; the faster replay is published and gated live
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $NEWF,int4/int8+int8 --buckets 1,2,4,8,16,32 \
    --trials 60 --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 \
    --confirm-sets 3 --confirm-max-new-tokens 32 --live-rounds 3 --db $DB --output $D/cpu-avx512.yaml 2>&1 | quiet | tee $D/tune.log
date
fi
if [ $step = bench ]; then
  # B = 1 and 2 on benchmark prompts (16 x 32 tokens, 5 rounds): the shipped profile (int4/int8+int8) and the new one
  # (int4vnni/int8vnni+int8), each with its own plain decoding, all four interleaved round by round in one process;
  # ratios per round to the shipped profile's plain decoding
  .venv/bin/python docs/results/amx_int8_head_2026-11-30/ab_formats.py $OLD $NEW mt_bench,humaneval 1,2 5 16 \
      $D/ab_formats.json 2>&1 | quiet | tee $D/ab_formats.log
fi
# firm DATASET BATCH ROUNDS: CAST against plain decoding under the new profile alone, 16 x 32 tokens
firm() {
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$1.jsonl --batch-size $2 --num-prompts 16 \
      --max-new-tokens 32 --rounds $3 --threads 2 --profile $NEW --json $D/firm_b$2_$1.json \
      --markdown $D/firm_b$2_$1.md 2>&1 | quiet | tail -4
}
if [ $step = firm ]; then firm mt_bench 1 9; fi  # where 5 rounds read 1.11x and 9 then 1.05x for the replaced profile
if [ $step = floor ]; then firm humaneval 2 7; fi  # B = 2 read 1.01x (0.95-1.08) in 5 rounds: the 0.98x floor
