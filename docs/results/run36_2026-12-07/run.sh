#!/usr/bin/env bash
# Run 36 (2026-12-07): the shipped head (the soup of runs 33 and 34) continued by one run of the shipped recipe on
# seed 36's prompts; the second of two siblings (run 35: seed 35) averaged into the next soup, which is what gets
# judged (docs/results/soup35_36_2026-12-07). Run 36 alone is not decoded on the benchmarks.
# From the repository root: bash docs/results/run36_2026-12-07/run.sh [stage...]
# (default: data train; ~30-50 min answers, ~40-60 train on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train)
exec bash tools/continue_head.sh --run 36 --seed 36 --from soup33_34=docs/results/soup_2026-12-06/head \
    --record docs/results/run36_2026-12-07 --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
