#!/usr/bin/env bash
# Run 30 (2026-12-05): run 29's head (shipped 2026-12-05) continued on seed 30's data (run 15's mix) with
# --lm-head-basis 24, run 29's recipe; tau on all 80 first turns of each benchmark against run 29 (its rows reused
# from its record). From the repository root (~90 min on 2 idle cores: data ~24, train ~37, tau ~2 x 9).
set -euo pipefail
A="--seed 30 --from run29=docs/results/run29_2026-12-05/head --record docs/results/run30_2026-12-05
   --baseline-record docs/results/run29_2026-12-05"
bash tools/continue_head.sh --run 30 $A data
bash tools/continue_head.sh --run 30 $A --lm-head-basis 24 --skip-eval train
bash tools/continue_head.sh --run 30 $A tau
