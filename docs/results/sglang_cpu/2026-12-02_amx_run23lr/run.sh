#!/bin/bash
# Re-tune profiles/sglang/cpu.yaml with head run 23-lr (shipped 2026-12-02) on an AMX Xeon (family 6, model 207).
# The shipped SGLang profile was tuned with head run 15 on another AMX Xeon (model 167). The same stages:
# SGLang's tables and the native engine's traces (../2026-11-30_amx/run.sh profile, collect), then the tune with
# its live gate through SGLang and the mt_bench bench (../2026-12-01_gate_amx/run.sh tune, bench), here against
# SGLang's EAGLE-3 and its adaptive mode as well.
# Run from the repository root: bash docs/results/sglang_cpu/2026-12-02_amx_run23lr/run.sh [all|profile|collect|tune|bench]
set -o pipefail
cd "$(dirname "$0")/../../../.."
export RETUNE_DIR=${RETUNE_DIR:-docs/results/sglang_cpu/2026-12-02_amx_run23lr}  # a later re-tune names its own (run24's)
D=$RETUNE_DIR
step=${1:-all}
source docs/results/sglang_cpu/log_filter.sh  # quiet
for stage in profile collect; do  # a fresh sglang-cpu.db: `profile` first, as the 2026-11-30 record did
  if [ $step = $stage ] || [ $step = all ]; then
    date; bash docs/results/sglang_cpu/2026-11-30_amx/run.sh $stage 2>&1 | quiet | tee $D/$stage.log; date
  fi
done
if [ $step = tune ] || [ $step = all ]; then date; bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh tune; date; fi
if [ $step = bench ] || [ $step = all ]; then
  date; BENCH_CONFIGS="plain eagle3 adaptive cast" bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh bench; date
fi
if [ $step = ab ]; then  # the profile shipped before (head run 15, model 167; kept as bench_shipped/cpu.yaml) in the same bench, plain beside it
  date; RETUNE_DIR=$D/bench_shipped BENCH_CONFIGS="plain cast" bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh bench
  date
fi
