#!/usr/bin/env bash
# Host work of a B = 1 step outside its forwards with the shipped profiles/cpu-avx512.yaml,
# on the 2026-11-29 record's scripts. From the repository root (~2 min on an idle machine):
# bash docs/results/host_work_avx512_2026-12-01/run.sh
set -euo pipefail
S=docs/results/host_path_b1_2026-11-29
P=profiles/cpu-avx512.yaml
for ds in humaneval mt_bench; do .venv/bin/python $S/host_split.py $P datasets/$ds.jsonl 8 2 vanilla,cast 2>&1 | grep -v USDT; done
for policy in cast vanilla; do .venv/bin/python $S/fine_breakdown.py $P datasets/humaneval.jsonl 8 $policy 2>&1 | grep -v USDT; done
