#!/bin/bash
# Re-tune profiles/cpu.yaml with head run 24 (digest b7e79c0f9645) on an AMX Xeon (family 6, model 207), 2026-12-02.
# The profile it replaces was tuned the same day on the same machine with head run 23-lr (kept here as
# cpu_shipped_run23lr.yaml; retune_amx_run23lr_2026-12-02). The same stages and flags: format-3 traces with the new
# head, the published format's tables re-timed (a new head is a new draft id, so its tables are measured again),
# every bucket tuned and gated live; then the A/B against the profile it replaces and the bench against plain
# decoding with both anchors (retune_avx512_2026-12-01/bench.sh).
# Run from the repository root: bash docs/results/retune_amx_run24_2026-12-02/run.sh [all|collect|profile|tune|ab|bench|b32]
set -o pipefail
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=docs/results/retune_amx_run24_2026-12-02
D=$RETUNE_DIR
step=${1:-all}
for stage in collect profile tune; do
  if [ $step = $stage ] || [ $step = all ]; then bash docs/results/retune_format3_amx_2026-12-01/run.sh $stage; fi
done
if [ $step = ab ]; then  # the profile tuned with head run 23-lr (same machine, same day) against today's
  .venv/bin/python docs/results/retune_format3_amx_2026-12-01/ab_profiles.py mt_bench,humaneval 1,4,16 5 8 \
      $D/ab_profiles.json $D/cpu_shipped_run23lr.yaml $D/cpu.yaml 2>&1 | grep -v "USDT\|it/s\]$\|s/it\]$" \
      | tee $D/ab_profiles.log
fi
if [ $step = bench ]; then  # CAST against plain, EAGLE-2's tree and the best static tree (B = 1), B = 2-16
  bash docs/results/retune_avx512_2026-12-01/bench.sh ${2:-$D/cpu.yaml}
fi
if [ $step = b32 ]; then  # B = 32 (32 prompts x 32 tokens, 3 rounds), which bench leaves out: the 0.98x floor
  bash docs/results/retune_avx512_run22_2026-12-01/bench_b32.sh ${2:-$D/cpu.yaml}
fi
