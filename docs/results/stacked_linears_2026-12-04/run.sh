#!/usr/bin/env bash
# Stacked linears (q/k/v, gate/up) against all apart (docs/results/2026-12-04_stacked_linears_avx512.md).
# From the repository root:
#   bash docs/results/stacked_linears_2026-12-04/run.sh linears   # ~30 s: per linear group, 3 repeats
#   bash docs/results/stacked_linears_2026-12-04/run.sh forward   # ~6 min: 9 processes of forward_ab.py, each layout
#                                                             # loaded first in turn, then the summary
#   bash docs/results/stacked_linears_2026-12-04/run.sh e2e FIRST  # ~7 min a benchmark: B = 1 plain decoding and CAST
#       with profiles/cpu-avx512.yaml and the llama.cpp anchor, interleaved in one process per benchmark; FIRST
#       (apart|stacked) is the layout loaded first; DATASETS overrides the benchmarks (mt_bench humaneval)
set -euo pipefail
D=docs/results/stacked_linears_2026-12-04
case ${1:-} in
linears)  # ~30 s: one layer's q/k/v and gate/up, apart against stacked, int4 and int8, 1/6/17 rows
    for i in 1 2 3; do
        .venv/bin/python $D/linears_ab.py 60 $D/linears_ab_repeat$i.json | grep -v USDT
    done ;;
forward)
    mkdir -p $D/forward_ab_runs
    for i in 0 1 2; do
        for order in apart,qkv,stacked qkv,stacked,apart stacked,apart,qkv; do
            .venv/bin/python $D/forward_ab.py 40 $D/forward_ab_runs/run${i}_${order//,/-}.json $order
        done
    done
    .venv/bin/python $D/forward_ab_summary.py $D/forward_ab_runs | tee $D/forward_ab_summary.log ;;
e2e)
    first=${2:?e2e needs FIRST: apart or stacked}
    for ds in ${DATASETS:-mt_bench humaneval}; do
        .venv/bin/python $D/ab.py profiles/cpu-avx512.yaml datasets/$ds.jsonl 8 64 6 \
            $D/ab_${ds}_${first}_first.json $first 2>&1 | grep --line-buffered -v USDT | tee $D/ab_${ds}_${first}_first.log
    done ;;
*)
    echo "usage: run.sh linears | run.sh forward | run.sh e2e apart|stacked" >&2
    exit 2 ;;
esac
