#!/usr/bin/env bash
# Every measurement of this record, in order, each logged beside its script.
# Run from the repository root: bash docs/results/host_path_b1_2026-11-29/run.sh
set -euo pipefail
D=docs/results/host_path_b1_2026-11-29
PY=.venv/bin/python
P=profiles/cpu.yaml
HE=datasets/humaneval.jsonl
quiet() { grep -v USDT || true; }
{ for t in 2 1; do $PY $D/host_split.py $P $HE 8 $t vanilla,cast 2>&1 | quiet; done; } | tee $D/host_split.log
{ for p in vanilla cast; do $PY $D/fine_breakdown.py $P $HE 8 $p 2>&1 | quiet; done; } | tee $D/fine_breakdown.log
{ for p in vanilla cast; do $PY $D/outside_ops.py $P $HE 4 $p 2>&1 | quiet; done; } | tee $D/outside_ops.log
$PY $D/draft_ops.py $P $HE 4 2>&1 | quiet | tee $D/draft_ops.log
{ for n in 1 2; do $PY $D/draft_call.py $P $HE $n 2>&1 | quiet; done; } | tee $D/draft_call.log
$PY $D/cold_host.py 2 | tee $D/cold_host.log
{ for p in vanilla cast; do $PY $D/greedy_in_engine.py $P $HE 4 $p 5 2>&1 | quiet; done; } | tee $D/greedy_in_engine.log
for ds in humaneval mt_bench; do $PY $D/ab_draft_int4.py $P datasets/$ds.jsonl 8 48 3 2>&1 | quiet | tee $D/ab_draft_int4_$ds.log; done
for p in vanilla cast; do $PY tools/step_profile.py --device cpu --dtype float32 --policy $p --profile $P --batch-size 1 \
    --num-prompts 4 --max-new-tokens 32 --dataset $HE --json $D/step_profile_$p.json 2>&1 | quiet; done
