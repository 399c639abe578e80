#!/usr/bin/env bash
# A/B arm (2026-12-07): run 36's recipe on run 36's own data (hard links, the same seed, so the same 2 % held-out
# split) with the training forward in bf16 autocast (--bf16-autocast), judged against run 36 (fp32) by the held-out
# accuracy at every unrolled step in the two train logs, and by τ (docs/results/2026-12-07_bf16_training_avx512.md).
# From the repository root, after run 36's train stage: bash docs/results/run36_bf16_2026-12-07/run.sh [stage...]
# (default: train; ~30 min on 2 idle cores).
set -euo pipefail
steps=("$@")
[ $# -gt 0 ] || steps=(train)
exec bash tools/continue_head.sh --run 36_bf16 --seed 36 --data-from 36 \
    --from soup33_34=docs/results/soup_2026-12-06/head --record docs/results/run36_bf16_2026-12-07 \
    --served-format int4vnni/int8vnni+int8vnni --bf16-autocast --skip-eval "${steps[@]}"
