#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 37 and 38 (both continue the shipped soup of runs 35 and 36, on
# seeds 37 and 38, with the int4 answers + bf16 training recipe) judged against the shipped soup on the shipping bar
# (fp32 target, all 80 first turns) and as cpu-avx512.yaml serves it (first 20). The soup of 35 and 36's records are
# the base: their rows are copied, so only the new soup decodes. From the repository root, after both runs' train:
#   bash docs/results/soup37_38_2026-12-07/run.sh [soup tau served eval]   (no stage: the first three)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns), into
# docs/results/draft_head_report_soup37_38.json.
# Every stage resumes: compare_heads keeps each decoded prompt. tau and served were run by an inline copy of
# continue_head.sh's judge, before --head and --soup existed; it made the same calls as this line.
set -euo pipefail
exec bash tools/continue_head.sh --soup 37,38 --from soup35_36=docs/results/soup35_36_2026-12-07/head \
    --record docs/results/soup37_38_2026-12-07 --baseline-record docs/results/soup35_36_2026-12-07 \
    --served-format int4vnni/int8vnni+int8vnni "$@"
