#!/usr/bin/env bash
# Run 40 (2026-12-07): the soup of runs 37 and 38 (not shipped: mt_bench up, humaneval level) continued by one run of
# the recipe from run 37 on (the target answering in int4vnni/int8vnni, training with --bf16-autocast) on seed 40's
# prompts; one of two siblings (run 39: seed 39) to be averaged into the next soup, which is what gets judged.
# From the repository root: bash docs/results/run40_2026-12-07/run.sh [stage...]
# (default: data train; on a 2-core AMD EPYC family 26 model 2 see train.log's stage times).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train)
exec bash tools/continue_head.sh --run 40 --seed 40 --from soup37_38=docs/results/soup37_38_2026-12-07/head \
    --record docs/results/run40_2026-12-07 --target-format int4vnni/int8vnni --bf16-autocast \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
