#!/bin/bash
# Re-profile profiles/cpu-avx512.yaml's two candidate formats (the int8vnni and the int8 draft head beside the fused
# int4vnni/int8vnni target) with `cast-autotune profile` timing both formats' rows together (2c6809a: round by round
# inside each row, the target rows timed once and shared), then the joint tune of the evening record
# (retune_avx512_int8vnni_head_2026-12-04/run.sh tune), on a 2-core AMD EPYC (family 25, model 17: AVX-512 +
# AVX512-VNNI + AVX512-BF16, no AMX), 2026-12-04 night. That record's joint tune published the int8 head by replay
# from two profiles whose target rows were timed 12 minutes apart and target tables read 1.3-1.6x apart; live, the int8vnni head won.
# Does the tuner rank the heads the way the live A/B did once their tables are timed together?
# Run from the repository root: bash docs/results/retune_avx512_interleaved_2026-12-04/run.sh [profile|redraft|tune|ab]
# (`profile` as first run, before 1645a90's re-warm; `redraft` re-timed its draft rows with it; with the re-warm in
# place `profile` alone does both.)
set -o pipefail
cd "$(dirname "$0")/../../.."
D=docs/results/retune_avx512_interleaved_2026-12-04
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
FORMATS=int4vnni/int8vnni+int8vnni,int4vnni/int8vnni+int8
step=${1:-profile}
quiet() { tr "\r" "\n" | grep -v "USDT\|it/s\]$\|s/it\]$\|run/s[],]\|s/run[],]\|^\s*$"; }  # progress bars dropped
NEW=$D/cpu-avx512.yaml OLD=profiles/cpu-avx512.yaml
if [ $step = profile ]; then  # the evening's flags
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $FORMATS --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile_first.log
date
fi
if [ $step = redraft ]; then  # what ran after the first profile's draft rows were found biased (see the record):
  # its draft rows (timed 22:28-22:38, before each turn's re-warm) deleted, then only the draft rows timed again
  # (--max-age 1200 keeps the target rows of 22:28-22:36) and every step of the design re-timed
  sqlite3 $DB "delete from measurements where role='draft' and target_model like
      'embedded:SmolLM2-135M-Instruct@int4vnni/int8vnni+%' and created >= '2026-12-04 22:28'" 2>/dev/null || true
date
.venv/bin/cast-autotune profile --gpu cpu --threads 2 --weight-format $FORMATS --batch-sizes 1,2,4,8,16,32 \
    --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 1200 \
    --overhead-steps 6 --overhead-warmup 2 --quiet --db $DB 2>&1 | quiet | tee $D/profile_redraft.log
date
fi
if [ $step = tune ]; then  # the evening's joint tune, same flags
date
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $FORMATS --buckets 1,2,4,8,16,32 \
    --trials 60 --max-traces 40 --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 --confirm-prompts 16 \
    --confirm-sets 3 --confirm-max-new-tokens 32 --live-rounds 3 --live-min-speedup 1.15 --db $DB \
    --output $NEW 2>&1 | quiet | tee $D/tune.log
date
fi
if [ $step = ab ]; then  # the new publication against the shipped profile, B = 1 and 2, 16 x 32 tokens, 5 rounds
  .venv/bin/python docs/results/retune_avx512_fused_2026-12-04/ab_profiles.py $OLD $NEW mt_bench,humaneval 1,2 5 16 \
      $D/ab_profiles.json 2>&1 | quiet | tee $D/ab_profiles.log
fi
