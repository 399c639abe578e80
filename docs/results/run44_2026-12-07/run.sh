#!/usr/bin/env bash
# Run 44 (2026-12-07): the shipped soup of runs 41 and 42 continued by one run of the recipe from run 37 on (the target
# answering in int4vnni/int8vnni, training with --bf16-autocast) on seed 44's prompts; one of two siblings (runs 43 and
# 44: seeds 43 and 44) to be averaged into the next soup, which is what gets judged.
# From the repository root: bash docs/results/run44_2026-12-07/run.sh [stage...]
# (default: data train; on a 2-core AMD EPYC family 26 model 2 see train.log's stage times).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(data train)
exec bash tools/continue_head.sh --run 44 --seed 44 --from soup41_42=sglang_cast/assets/smollm2-135m-eagle \
    --record docs/results/run44_2026-12-07 --target-format int4vnni/int8vnni --bf16-autocast \
    --served-format int4vnni/int8vnni+int8vnni --skip-eval "${steps[@]}"
