#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 41 and 42 (both continue the shipped soup of runs 39 and 40, on
# seeds 41 and 42, with the int4 answers + bf16 training recipe) judged against the shipped soup of runs 39 and 40 on
# the shipping bar (fp32 target, all 80 first turns) and as cpu-avx512.yaml serves it (first 20), by continue_head.sh's
# own stages. The soup of 39 and 40's record is the base: its rows (every earlier head's and its own) are copied, so
# only the new soup decodes. From the repository root, after both runs' train:
#   bash docs/results/soup41_42_2026-12-07/run.sh [soup tau served eval]   (no stage: the first three)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns), into
# docs/results/draft_head_report_soup41_42.json. Every stage resumes: compare_heads keeps each decoded prompt.
set -euo pipefail
D=docs/results/soup41_42_2026-12-07
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
SOUP=$W/soup41_42/head
stages=("$@")
[ $# -gt 0 ] || stages=(soup tau served)
for stage in "${stages[@]}"; do
  case $stage in
    soup) $PY tools/average_heads.py --output $SOUP $W/run41/head $W/run42/head ;;
    tau|served) bash tools/continue_head.sh --head soup41_42=$SOUP --from soup39_40=docs/results/soup39_40_2026-12-07/head \
                    --record $D --baseline-record docs/results/soup39_40_2026-12-07 \
                    --served-format int4vnni/int8vnni+int8vnni $stage ;;
    eval) $PY tools/compare_heads.py eval docs/results/draft_head_report_soup41_42.json $SOUP ;;
    *) echo "run.sh: unknown stage '$stage' (soup, tau, served, eval)" >&2; exit 2 ;;
  esac
done
