#!/usr/bin/env bash
# Run 33 (started 2026-12-06): run 32's head continued by one run of the shipped recipe on seed 33's prompts,
# judged against it on the fp32 bar (tau, all 80 first turns) and as cpu-avx512.yaml serves it (served, first 20).
# From the repository root: bash docs/results/run33_2026-12-06/run.sh [stage...]
# (default: data train tau served; ~24 min answers, ~38 train, ~18 tau, ~6 served on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau served)
exec bash tools/continue_head.sh --run 33 --seed 33 --from run32=docs/results/run32_2026-12-06/head \
    --record docs/results/run33_2026-12-06 --baseline-record docs/results/run32_2026-12-06 \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
