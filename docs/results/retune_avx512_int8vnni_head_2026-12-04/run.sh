#!/bin/bash
# Re-profile and re-tune profiles/cpu-avx512.yaml with the int8vnni draft head beside the fused int4vnni/int8vnni
# target, after session 67's host-work cuts, on a 2-core AMD EPYC (family 25, model 17: AVX-512 + AVX512-VNNI +
# AVX512-BF16, no AMX), 2026-12-04. Both draft formats (int8vnni, int8) are re-timed (--max-age 0: the host overhead
# tables predate the cuts) and tuned on the same traces; the faster replay is published, gated live at 1.15x as the
# shipped profile was (docs/results/retune_avx512_fused_2026-12-04/run.sh).
# Run from the repository root: bash docs/results/retune_avx512_int8vnni_head_2026-12-04/run.sh [profile|tune|ab|tune_vnni_head|ab_heads|floor|anchor]
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/retune_avx512_int8vnni_head_2026-12-04
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
FORMATS=int4vnni/int8vnni+int8vnni,int4vnni/int8vnni+int8
step=${1:-profile}
quiet() { tr "\r" "\n" | grep -v "USDT\|it/s\]$\|s/it\]$\|run/s[],]\|s/run[],]\|^\s*$"; }  # progress bars dropped
NEW=$D/cpu-avx512.yaml OLD=profiles/cpu-avx512.yaml
if [ $step = profile ]; then
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
if [ $step = ab ]; then  # the published profile against the shipped one, same format, B = 1, 16 x 32 tokens, 5 rounds
  .venv/bin/python docs/results/retune_avx512_fused_2026-12-04/ab_profiles.py $OLD $NEW mt_bench,humaneval 1 5 16 \
      $D/ab_profiles.json 2>&1 | quiet | tee $D/ab_profiles.log
fi
if [ $step = tune_vnni_head ]; then  # the int8vnni head alone (the joint tune published int8's by replay), same flags
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format int4vnni/int8vnni+int8vnni --buckets 1,2,4,8,16,32 \
    --trials 60 --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 \
    --confirm-sets 3 --confirm-max-new-tokens 32 --live-rounds 3 --live-min-speedup 1.15 --db $DB \
    --output $D/vnni_head/cpu-avx512.yaml 2>&1 | quiet | tee $D/vnni_head/tune.log
date
fi
if [ $step = ab_heads ]; then  # the two published profiles (int8 head, int8vnni head), each with its plain decoding
  .venv/bin/python docs/results/amx_int8_head_2026-11-30/ab_formats.py $NEW $D/vnni_head/cpu-avx512.yaml \
      mt_bench,humaneval 1,2 5 16 $D/ab_heads.json 2>&1 | quiet | tee $D/ab_heads.log
fi
if [ $step = floor ]; then  # B = 2 on mt_bench (the A/B's worst round 0.77x) in 7 rounds, the shipped profile
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/mt_bench.jsonl --batch-size 2 --num-prompts 16 \
      --max-new-tokens 32 --rounds 7 --threads 2 --profile profiles/cpu-avx512.yaml --json $D/floor_b2_mt_bench.json \
      --markdown $D/floor_b2_mt_bench.md 2>&1 | quiet | tail -4
fi
if [ $step = anchor ]; then  # llama.cpp on the same GGUF, B = 1, 8 mt_bench prompts x 128 tokens (bash run.sh anchors first)
  .venv/bin/python tools/bench.py --methods vanilla,llamacpp,cast --dataset datasets/mt_bench.jsonl --batch-size 1 \
      --num-prompts 8 --max-new-tokens 128 --rounds 3 --threads 2 --profile profiles/cpu-avx512.yaml --json $D/anchor.json \
      --markdown $D/anchor.md 2>&1 | quiet | tail -6
fi
