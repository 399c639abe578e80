#!/bin/bash
# The re-tuned profiles/cpu.yaml (per-bucket lookup branch) on the benchmark prompts, B = 1-16 (AMX Xeon, 2026-11-29).
set -e
cd "$(dirname "$0")/../../.."
OUT=docs/results/retune_lookup_amx_2026-11-29/bench_b1-16
mkdir -p $OUT
for d in mt_bench humaneval; do
  date
  .venv/bin/python tools/bench.py --methods vanilla,eagle2-best,cast,cast+nolookup --dataset datasets/$d.jsonl \
      --batch-size 1,2,4,8,16 --num-prompts 16 --max-new-tokens 32 --rounds 5 --threads 2 \
      --profile profiles/cpu.yaml --db $HOME/.cache/sglang_cast/autotune.db --json $OUT/$d.json --markdown $OUT/$d.md \
      2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]\|run/s\|s/run\|batch size/s\|s/batch size" || true
done
date
