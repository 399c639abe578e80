#!/usr/bin/env bash
# The benchmark suite behind docs/benchmarks.md: per-dataset tables, the ablation and
# the batch sweep, all with tools/bench.py on the shipped head and profiles/cpu.yaml.
# Results go to docs/results/bench/. Sizes are environment variables so a quicker or
# longer run is one override away, e.g. PROMPTS=16 NEW_TOKENS=128 bash tools/bench_suite.sh, and a GPU run
# DEVICE=cuda DTYPE=bfloat16 bash tools/bench_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
DATA=${DATA:-datasets}
OUT=${OUT:-docs/results/bench}
PROMPTS=${PROMPTS:-4}              # prompts per dataset table (>= its largest batch size)
NEW_TOKENS=${NEW_TOKENS:-64}       # new tokens per prompt
TABLE_BATCHES=${TABLE_BATCHES:-1,4}
ABLATION_BATCHES=${ABLATION_BATCHES:-1,2,4,8,16}
ABLATION_PROMPTS=${ABLATION_PROMPTS:-16} # >= the ablation's largest batch size
ABLATION_TOKENS=${ABLATION_TOKENS:-32}
SWEEP_PROMPTS=${SWEEP_PROMPTS:-32} # the sweep needs at least its largest batch size
SWEEP_TOKENS=${SWEEP_TOKENS:-24}
STEPS=${STEPS:-tables,ablation,sweep}
ROUNDS=${ROUNDS:-3}                # interleaved timed rounds per (method, batch size); the median is reported
DEVICE=${DEVICE:-cpu}              # cpu, cuda or cuda:N
DTYPE=${DTYPE:-float32}            # float32, bfloat16 or float16
COMMON=(--rounds "$ROUNDS" --device "$DEVICE" --dtype "$DTYPE")
mkdir -p "$OUT"

if [[ $STEPS == *tables* ]]; then
  for dataset in mt_bench humaneval alpaca; do
    "$PY" tools/bench.py --methods vanilla,eagle2,eagle2-best,cast,goodput \
      --dataset "$DATA/$dataset.jsonl" --batch-size "$TABLE_BATCHES" --temperature 0,1 \
      --num-prompts "$PROMPTS" --max-new-tokens "$NEW_TOKENS" \
      --json "$OUT/$dataset.json" --markdown "$OUT/$dataset.md" "${COMMON[@]}"
  done
fi

if [[ $STEPS == *ablation* ]]; then
  "$PY" tools/bench.py \
    --methods vanilla,eagle2,cast-rerank@eagle2,cast-rerank-depth@eagle2,cast-depth-breadth@eagle2,cast@eagle2,cast \
    --dataset "$DATA/mt_bench.jsonl" --batch-size "$ABLATION_BATCHES" --temperature 0 \
    --num-prompts "$ABLATION_PROMPTS" --max-new-tokens "$ABLATION_TOKENS" \
    --json "$OUT/ablation.json" --markdown "$OUT/ablation.md" "${COMMON[@]}"
fi

if [[ $STEPS == *sweep* ]]; then
  "$PY" tools/bench.py --methods vanilla,eagle2,eagle2-best,cast,goodput \
    --dataset "$DATA/mt_bench.jsonl" --batch-size 1,2,4,8,16,32 --temperature 0 \
    --num-prompts "$SWEEP_PROMPTS" --max-new-tokens "$SWEEP_TOKENS" \
    --json "$OUT/sweep.json" --markdown "$OUT/sweep.md" --plot "$OUT/sweep.png" "${COMMON[@]}"
fi
