#!/usr/bin/env bash
# A B = 1 step's host work on this CPU with profiles/cpu-avx512.yaml, before / after the
# 2026-12-04 cuts in one process (ab_host.py), and the cost of a cold op (cold_ops.py).
# From the repository root (~6 min on an idle 2-core machine):
#   bash docs/results/host_work_2026-12-04/run.sh
set -euo pipefail
D=docs/results/host_work_2026-12-04
.venv/bin/python $D/cold_ops.py 2 | tee $D/cold_ops.log
for ds in humaneval mt_bench; do
  for policy in cast vanilla; do
    .venv/bin/python $D/ab_host.py $policy 10 datasets/$ds.jsonl 8 2>&1 | grep -v USDT
  done
done | tee $D/ab_host.log
# CAST against plain decoding at B = 1 with the shipped profile after the cuts (16 x 32 tokens, 7 rounds)
for ds in mt_bench humaneval; do
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/$ds.jsonl --batch-size 1 --num-prompts 16 \
      --max-new-tokens 32 --rounds 7 --threads 2 --profile profiles/cpu-avx512.yaml --json $D/firm_b1_$ds.json \
      --markdown $D/firm_b1_$ds.md 2>&1 | grep -v USDT | tail -4
done

.venv/bin/python $D/ops_warm.py | tee $D/ops_warm.log
.venv/bin/python $D/greedy_first_call.py vanilla 2>&1 | grep -v USDT | tee $D/greedy_first_call.log
.venv/bin/python $D/greedy_first_call.py cast 2>&1 | grep -v USDT | tee -a $D/greedy_first_call.log
