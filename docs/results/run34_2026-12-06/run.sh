#!/usr/bin/env bash
# Run 34 (started 2026-12-06): run 32's head (the best so far) continued by one run of the shipped recipe on seed 34's
# prompts, judged against it on the fp32 bar (tau, all 80 first turns) and as cpu-avx512.yaml serves it (served,
# first 20). Run 33 (run 32 on seed 33) came out level with run 32; this is a second draw from the same head.
# From the repository root: bash docs/results/run34_2026-12-06/run.sh [stage...]
# (default: data train tau served; ~24 min answers, ~38 train, ~18 tau, ~6 served on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau served)
exec bash tools/continue_head.sh --run 34 --seed 34 --from run32=docs/results/run32_2026-12-06/head \
    --record docs/results/run34_2026-12-06 --baseline-record docs/results/run32_2026-12-06 \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
