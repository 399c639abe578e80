#!/bin/bash
# B = 1 again, alone (same command as bench.sh with --batch-size 1), to see how far the B = 1 ratios move run to run.
set -e
cd "$(dirname "$0")/../../.."
OUT=docs/results/retune_lookup_amx_2026-11-29/bench_b1_repeat
mkdir -p $OUT
for d in mt_bench humaneval; do
  date
  .venv/bin/python tools/bench.py --methods vanilla,eagle2-best,cast,cast+nolookup --dataset datasets/$d.jsonl \
      --batch-size 1 --num-prompts 16 --max-new-tokens 32 --rounds 5 --threads 2 \
      --profile profiles/cpu.yaml --db $HOME/.cache/sglang_cast/autotune.db --json $OUT/$d.json --markdown $OUT/$d.md \
      2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]\|run/s\|s/run\|batch size/s\|s/batch size" || true
done
date
