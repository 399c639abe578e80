#!/bin/bash
# Interleaved A/B of the two profiles (AMX Xeon, 2026-11-29): B = 8 and 1 on mt_bench and humaneval (B = 16: both profiles decode plainly).
cd /work/main
R=docs/results/draft_dense_switch_amx_2026-11-29
for b in ${BATCHES:-8 1}; do
  n=$([ $b = 16 ] && echo 32 || echo 16)
  for d in mt_bench humaneval; do
    date
    .venv/bin/python $R/ab_formats.py profiles/cpu.yaml $R/cpu_switch.yaml $d $b 5 $n 2>&1 | grep -v Warn > $R/ab_b${b}_$d.log
    head -3 $R/ab_b${b}_$d.log
  done
done
date
