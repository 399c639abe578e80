#!/bin/bash
# B = 8 under the switch profile: CAST's steps against their charge, per verify width (AMX Xeon, 2026-11-29).
cd /work/main
R=docs/results/draft_dense_switch_amx_2026-11-29
for d in mt_bench humaneval; do
  date
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$d.jsonl --batch-size 8 --num-prompts 16 \
      --max-new-tokens 32 --rounds 3 --threads 2 --profile $R/cpu_switch.yaml --db $HOME/.cache/sglang_cast/autotune.db \
      --json $R/bench_b8_$d.json 2>&1 | tr '\r' '\n' | grep -v "it/s\]$\|s/it\]$\|s/batch size\]$" | tail -4
done
date
