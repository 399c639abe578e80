#!/usr/bin/env bash
# Run 35 (2026-12-07): the shipped head (the soup of runs 33 and 34) continued by one run of the shipped recipe on
# seed 35's prompts, judged against the soup on the fp32 bar (tau, all 80 first turns) and as cpu-avx512.yaml serves
# it (served, first 20). The first of two siblings (run 36: seed 36) to be averaged into the next soup.
# From the repository root: bash docs/results/run35_2026-12-07/run.sh [stage...]
# (default: data train tau served; ~30 min answers, ~40 train, ~25 tau, ~6 served on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau served)
exec bash tools/continue_head.sh --run 35 --seed 35 --from soup33_34=docs/results/soup_2026-12-06/head \
    --record docs/results/run35_2026-12-07 --baseline-record docs/results/soup_2026-12-06 \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
