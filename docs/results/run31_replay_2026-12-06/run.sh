#!/usr/bin/env bash
# Run 31-replay (2026-12-06), the replay A/B arm of run 31: run 30-q's head trained on run 31's prompts and answers
# (hard-linked, seed 31) with runs 29's and 30's fp32 answers replayed beside them, held to run 31's 378 steps;
# judged against run 31 on the fp32 bar (tau, all 80 first turns). From the repository root:
#   bash docs/results/run31_replay_2026-12-06/run.sh [stage...]   (default: data train tau; ~1 + 40 + 18 min alone)
# Needs run 31's work dir (docs/results/run31_2026-12-06/run.sh data) and runs 29's and 30's responses stages.
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau)
exec bash tools/continue_head.sh --run 31_replay --seed 31 --data-from 31 \
    --from run30_q=docs/results/run30_q_2026-12-05/head --record docs/results/run31_replay_2026-12-06 \
    --baseline-record docs/results/run31_2026-12-06 --replay 29,30 --max-steps 378 \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
