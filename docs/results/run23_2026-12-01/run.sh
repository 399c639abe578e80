#!/usr/bin/env bash
# #48 item 4: head run 23, run 22's head (shipped then, weights digest 966ab16ae7d8) continued by one more run of
# the same recipe on the next unused seed (22), judged prompt by prompt against run 22 on all 80 first turns of
# each benchmark, starting from run 22's per-prompt rows (runs 15, 20, 21 and 22, measured on the AVX-512 EPYC).
# Resumable; from the repository root:
#   bash docs/results/run23_2026-12-01/run.sh [data|train|tau|gap]...
# Run 22's head is its work dir's (the assets hold run 23-lr's since): rebuild it with run22_2026-12-01/run.sh.
exec bash tools/continue_head.sh --run 23 --seed 22 --from run22=${W:-$HOME/.cache/sglang_cast/rebuild}/run22/head \
    --lr 5e-4 --record docs/results/run23_2026-12-01 --baseline-record docs/results/run22_2026-12-01 "$@"
