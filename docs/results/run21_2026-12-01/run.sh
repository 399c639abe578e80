#!/usr/bin/env bash
# #48 item 4: head run 21, the shipped head's next continued run with the recipe the 2026-12-01 A/B kept
# (7 training-time-test steps, no --vocab-swap). It continues run 20 (run 15 + seed 19's half mix, TTT 7,
# no swap: docs/results/ttt_ab_2026-12-01/run.sh noswap) on seed 20 with run 15's whole mix, then judges
# it prompt by prompt against runs 15 ("shipped" then) and 20 on all 80 first turns of each benchmark.
# Resumable: rerun a stage after an interruption. From the repository root:
#   bash docs/results/run21_2026-12-01/run.sh [data|train|tau|gap]...
set -euo pipefail
D=docs/results/run21_2026-12-01
W=${W:-$HOME/.cache/sglang_cast/rebuild}
for stage in ${@:-data train tau gap}; do
  case $stage in
    tau) .venv/bin/python tools/compare_heads.py decode $D/humaneval.json humaneval --prompts 0:80 \
             shipped=$W/run15/head run20=$W/ttt7_noswap/head run21=$W/run21/head 2>&1 | tee $D/humaneval.log
         .venv/bin/python tools/compare_heads.py decode $D/mt_bench.json mt_bench --prompts 0:80 \
             shipped=$W/run15/head run21=$W/run21/head 2>&1 | tee $D/mt_bench.log ;;
    *) bash tools/continue_head.sh --run 21 --seed 20 --from run20=$W/ttt7_noswap/head --lr 5e-4 --record $D $stage ;;
  esac
done
