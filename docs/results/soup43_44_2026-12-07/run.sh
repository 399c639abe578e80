#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 43 and 44 (both continue the shipped soup of runs 41 and 42, on
# seeds 43 and 44, with the int4 answers + bf16 training recipe) judged against the shipped soup of runs 41 and 42 on
# the shipping bar (fp32 target, all 80 first turns) and as cpu-avx512.yaml serves it (first 20), by continue_head.sh's
# own stages (`--soup`). The soup of 41 and 42's record is the base: its rows (every earlier head's and its own) are
# copied, so only the new soup decodes. From the repository root, after both runs' train:
#   bash docs/results/soup43_44_2026-12-07/run.sh [soup tau served eval]   (no stage: the first three)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns), into
# docs/results/draft_head_report_soup43_44.json. Every stage resumes: compare_heads keeps each decoded prompt.
set -euo pipefail
exec bash tools/continue_head.sh --soup 43,44 --from soup41_42=docs/results/soup41_42_2026-12-07/head \
    --record docs/results/soup43_44_2026-12-07 --baseline-record docs/results/soup41_42_2026-12-07 \
    --served-format int4vnni/int8vnni+int8vnni "$@"
