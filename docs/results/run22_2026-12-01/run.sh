#!/usr/bin/env bash
# #48 item 4: head run 22, the shipped head then (run 21) continued by one run of the recipe of
# docs/draft_head.md (7 training-time-test steps, no --vocab-swap) and run 15's mix on the next unused seed
# (21), judged prompt by prompt against run 21 on all 80 first turns of each benchmark, starting from run 21's
# per-prompt rows. Resumable; from the repository root:
#   bash docs/results/run22_2026-12-01/run.sh [data|train|tau|gap]...
exec bash tools/continue_head.sh --run 22 --seed 21 --from run21=${W:-$HOME/.cache/sglang_cast/rebuild}/run21/head \
    --lr 5e-4 --record docs/results/run22_2026-12-01 --baseline-record docs/results/run21_2026-12-01 "$@"
