#!/bin/bash
# Re-tune profiles/cpu.yaml with head run 23-lr (digest 7f0a3696ebfe) on an AMX Xeon (family 6, model 207), 2026-12-02.
# The shipped cpu.yaml was tuned on 2026-11-30 with head run 15 on another AMX Xeon (model 167). The stages and flags
# of retune_format3_amx_2026-12-01/run.sh (format-3 traces with today's head, the published format's tables re-timed
# on this machine, every bucket tuned and gated live), then an A/B of the new profile against the shipped one and
# the bench of CAST against plain decoding with both anchors (retune_avx512_2026-12-01/bench.sh).
# Run from the repository root: bash docs/results/retune_amx_run23lr_2026-12-02/run.sh [all|collect|profile|tune|ab|bench|b32]
set -o pipefail
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=${RETUNE_DIR:-docs/results/retune_amx_run23lr_2026-12-02}  # a later re-tune names its own (run24's)
D=$RETUNE_DIR
step=${1:-all}
for stage in collect profile tune; do
  if [ $step = $stage ] || [ $step = all ]; then bash docs/results/retune_format3_amx_2026-12-01/run.sh $stage; fi
done
if [ $step = ab ]; then  # the profile shipped before (head run 15, model 167; kept here) against today's
  .venv/bin/python docs/results/retune_format3_amx_2026-12-01/ab_profiles.py mt_bench,humaneval 1,4,16 5 8 \
      $D/ab_profiles.json ${AB_BASELINE:-$D/cpu_shipped_2026-11-30.yaml} $D/cpu.yaml 2>&1 | grep -v "USDT\|it/s\]$\|s/it\]$" \
      | tee $D/ab_profiles.log
fi
if [ $step = bench ]; then  # CAST against plain, EAGLE-2's tree and the best static tree (B = 1), B = 2-16
  bash docs/results/retune_avx512_2026-12-01/bench.sh ${2:-$D/cpu.yaml}
fi
if [ $step = b32 ]; then  # B = 32 (32 prompts x 32 tokens, 3 rounds), which bench leaves out: the 0.98x floor
  bash docs/results/retune_avx512_run22_2026-12-01/bench_b32.sh ${2:-$D/cpu.yaml}
fi
