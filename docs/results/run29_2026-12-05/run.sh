#!/usr/bin/env bash
# Run 29 (2026-12-05): --lm-head-basis at full size. Run 28's head continued on seed 29's data (run 15's mix) by
# two arms on the same prompts and answers: run 29 with --lm-head-basis 24 (the scale the 48-step probe preferred,
# docs/results/lm_head_basis_ab_2026-12-05/scale_probe.sh) and run 29_plain without it; then tau on all 80 first
# turns of each benchmark against run 28 (its rows reused from its record). From the repository root (~2 h on 2 cores).
set -euo pipefail
A="--seed 29 --from run28=docs/results/run28_2026-12-05/head --record docs/results/run29_2026-12-05
   --baseline-record docs/results/run28_2026-12-05"
bash tools/continue_head.sh --run 29 $A data
bash tools/continue_head.sh --run 29 $A --lm-head-basis 24 --skip-eval train
bash tools/continue_head.sh --run 29_plain --data-from 29 $A --skip-eval train
bash tools/continue_head.sh --run 29 $A tau
bash tools/continue_head.sh --run 29_plain $A tau
