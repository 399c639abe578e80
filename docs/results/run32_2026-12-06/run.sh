#!/usr/bin/env bash
# Run 32 (started 2026-12-06): run 31's head (the best so far, not shipped) continued by one run of the shipped recipe
# on seed 32's prompts, judged against it on the fp32 bar (tau, all 80 first turns) and as cpu-avx512.yaml serves it
# (served, first 20). From the repository root: bash docs/results/run32_2026-12-06/run.sh [stage...]
# (default: data train tau served; ~22 min answers, ~38 train, ~18 tau, ~6 served on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau served)
exec bash tools/continue_head.sh --run 32 --seed 32 --from run31=docs/results/run31_2026-12-06/head \
    --record docs/results/run32_2026-12-06 --baseline-record docs/results/run31_2026-12-06 \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
