#!/bin/bash
# B = 1, 2 with the re-profiled, re-tuned profiles/cpu.yaml (AMX Xeon, 2026-11-29).
cd /work/main
OUT=docs/results/verify_width_amx_2026-11-29/bench_b1-2
for d in mt_bench humaneval; do
  date
  .venv/bin/python tools/bench.py --methods vanilla,eagle2-best,cast,cast+nolookup --dataset datasets/$d.jsonl \
      --batch-size 1,2 --num-prompts 16 --max-new-tokens 32 --rounds 5 --threads 2 \
      --profile profiles/cpu.yaml --db $HOME/.cache/sglang_cast/autotune.db \
      --json $OUT/$d.json --markdown $OUT/$d.md 2>&1 | tr '\r' '\n' | grep -v "it/s\]$\|s/it\]$\|s/batch size\]$"
done
date
