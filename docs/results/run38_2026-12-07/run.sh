#!/usr/bin/env bash
# Run 38 (2026-12-07): the shipped head (the soup of runs 35 and 36) continued by one run of the recipe from run 37 on
# (the target answering in int4vnni/int8vnni, training with --bf16-autocast) on seed 38's prompts; one of two siblings
# (run 37: seed 37) to be averaged into the next soup, which is what gets judged. Run 38 alone is not decoded on the
# benchmarks. From the repository root: bash docs/results/run38_2026-12-07/run.sh [stage...]
# (default: data train; on a 2-core AMD EPYC family 26 model 2 see train.log's stage times).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train)
exec bash tools/continue_head.sh --run 38 --seed 38 --from soup35_36=docs/results/soup35_36_2026-12-07/head \
    --record docs/results/run38_2026-12-07 --target-format int4vnni/int8vnni --bf16-autocast \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
