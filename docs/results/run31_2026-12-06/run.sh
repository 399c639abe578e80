#!/usr/bin/env bash
# Run 31 (2026-12-06): run 30-q's head (shipped) continued by one run of the shipped recipe on seed 31's prompts,
# judged against it on the fp32 bar (tau, all 80 first turns) and as cpu-avx512.yaml serves it (served, first 20).
# The gap stage was skipped. From the repository root: bash docs/results/run31_2026-12-06/run.sh [stage...]
# (default: data train tau served; ~22 min answers, ~38 train, ~18 tau, ~6 served on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau served)
exec bash tools/continue_head.sh --run 31 --seed 31 --from run30_q=docs/results/run30_q_2026-12-05/head \
    --record docs/results/run31_2026-12-06 --baseline-record docs/results/run30_q_2026-12-05 \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
