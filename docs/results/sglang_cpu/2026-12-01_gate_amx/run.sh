#!/bin/bash
# tune --backend sglang with its live gate through SGLang (AMX Xeon, 2026-12-01): the
# 2026-11-30 record's SGLang tables and format-3 traces (../2026-11-30_amx/run.sh profile,
# collect), tuned and gated live on SGLang's CPU engine, then benchmarked as that record was.
#   bash run.sh tune|bench      (record: README.md beside this file)
set -e
cd "$(dirname "$0")/../../../.."
D=${RETUNE_DIR:-docs/results/sglang_cpu/2026-12-01_gate_amx}  # where the profile and logs go (a later re-tune names its own)
M=~/.cache/sglang_cast/models/SmolLM2-135M-Instruct
H=sglang_cast/assets/smollm2-135m-eagle
DB=~/.cache/sglang_cast/sglang-cpu.db
source docs/results/sglang_cpu/log_filter.sh  # quiet
case "$1" in
tune)
  .venv-sglang/bin/python -m autotune tune --backend sglang --gpu cpu --model-path $M --draft-path $H \
    --db $DB --buckets 1,4 --trials 60 --max-tokens 16 --confirm-prompts 8 --confirm-sets 2 \
    --confirm-max-new-tokens 32 --live-rounds 3 --output $D/cpu.yaml 2>&1 | quiet | tee $D/tune.log ;;
bench)
  mkdir -p $D/bench
  .venv-sglang/bin/python tools/bench_sglang_cpu.py --rounds 2 --concurrency 1 4 --datasets mt_bench \
    --configs ${BENCH_CONFIGS:-plain cast} --cast-profile $D/cpu.yaml --out $D/bench 2>&1 | quiet | grep -a "^round" | tee $D/bench/rounds.log ;;
*) echo "usage: run.sh tune|bench"; exit 2 ;;
esac
