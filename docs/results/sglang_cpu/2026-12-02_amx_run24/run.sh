#!/bin/bash
# Re-tune profiles/sglang/cpu.yaml with head run 24 (digest b7e79c0f9645) on an AMX Xeon (family 6, model 207),
# 2026-12-02. The profile it replaces was tuned the same day on the same machine with head run 23-lr
# (../2026-12-02_amx_run23lr, kept as bench_shipped/cpu.yaml); the same stages and flags: SGLang's tables and the
# native engine's traces into a fresh sglang-cpu.db (../2026-11-30_amx/run.sh profile, collect), the tune with its
# live gate through SGLang and the mt_bench bench against SGLang's EAGLE-3 and adaptive mode
# (../2026-12-01_gate_amx/run.sh tune, bench).
# Run from the repository root: bash docs/results/sglang_cpu/2026-12-02_amx_run24/run.sh [all|profile|collect|tune|bench|ab]
set -o pipefail
cd "$(dirname "$0")/../../../.."
export RETUNE_DIR=docs/results/sglang_cpu/2026-12-02_amx_run24
D=$RETUNE_DIR
step=${1:-all}
quiet() {  # tqdm redraws (split at \r), SGLang's own log lines and import warnings: the logs keep each bar's 100 % line
  tr '\r' '\n' | grep -a -v " [0-9]\{1,2\}%|\|it/s\]$\|s/it\]$\|s/engine\]$\|^\[20[0-9-]* [0-9:]*\]\|Warning: \|warnings.warn(\|^\s*$"
}
for stage in profile collect; do  # `profile` first into a fresh sglang-cpu.db, as the records before did
  if [ $step = $stage ] || [ $step = all ]; then
    date; bash docs/results/sglang_cpu/2026-11-30_amx/run.sh $stage 2>&1 | quiet | tee $D/$stage.log; date
  fi
done
if [ $step = tune ] || [ $step = all ]; then date; bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh tune; date; fi
if [ $step = bench ] || [ $step = all ]; then
  date; BENCH_CONFIGS="plain eagle3 adaptive cast" bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh bench; date
fi
if [ $step = ab ]; then  # the profile tuned with head run 23-lr (bench_shipped/cpu.yaml) in the same bench, plain beside it
  date; RETUNE_DIR=$D/bench_shipped BENCH_CONFIGS="plain cast" bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh bench
  date
fi
