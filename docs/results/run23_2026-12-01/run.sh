#!/usr/bin/env bash
# #48 item 4: head run 23, the shipped head (run 22, weights digest 966ab16ae7d8) continued by one more run of
# the same recipe on the next unused seed (22), judged prompt by prompt against run 22 on all 80 first turns of
# each benchmark, starting from run 22's per-prompt rows (runs 15, 20, 21 and 22, measured on the AVX-512 EPYC).
# Resumable; from the repository root:
#   bash docs/results/run23_2026-12-01/run.sh [data|train|tau|gap]...
exec bash tools/continue_head.sh --run 23 --seed 22 --from run22=sglang_cast/assets/smollm2-135m-eagle \
    --lr 5e-4 --record docs/results/run23_2026-12-01 --baseline-record docs/results/run22_2026-12-01 "$@"
