#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 39 and 40 (both continue the soup of runs 37 and 38, on seeds 39 and
# 40, with the int4 answers + bf16 training recipe) judged against the shipped soup of runs 35 and 36 on the shipping
# bar (fp32 target, all 80 first turns) and as cpu-avx512.yaml serves it (first 20), by continue_head.sh's own stages
# (`--soup`). The soup of 37 and 38's record is the base: its rows (the shipped soup's and its own) are copied, so only
# the new soup decodes and the tables show all three. From the repository root, after both runs' train:
#   bash docs/results/soup39_40_2026-12-07/run.sh [soup tau served eval]   (no stage: the first three)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns), into
# docs/results/draft_head_report_soup39_40.json. Every stage resumes: compare_heads keeps each decoded prompt.
set -euo pipefail
exec bash tools/continue_head.sh --soup 39,40 --from soup35_36=docs/results/soup35_36_2026-12-07/head \
    --record docs/results/soup39_40_2026-12-07 --baseline-record docs/results/soup37_38_2026-12-07 \
    --served-format int4vnni/int8vnni+int8vnni "$@"
