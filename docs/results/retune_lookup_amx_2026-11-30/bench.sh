#!/bin/bash
# B = 1, 2 with the re-tuned profiles/cpu.yaml, its branch on and off (AMX Xeon, 2026-11-30).
cd "$(dirname "$0")/../../.."
OUT=docs/results/retune_lookup_amx_2026-11-30/bench_b1-2
mkdir -p $OUT
for d in mt_bench humaneval; do
  date
  .venv/bin/python tools/bench.py --methods vanilla,cast,cast+nolookup --dataset datasets/$d.jsonl \
      --batch-size 1,2 --num-prompts 16 --max-new-tokens 32 --rounds 3 --threads 2 \
      --profile profiles/cpu.yaml --db $HOME/.cache/sglang_cast/autotune.db \
      --json $OUT/$d.json --markdown $OUT/$d.md 2>&1 | tr '\r' '\n' | grep -v "it/s\]$\|s/it\]$\|s/batch size\]$"
done
date
