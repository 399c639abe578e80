#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 35 and 36 (both continue the shipped soup of runs 33 and 34, on
# seeds 35 and 36) judged against the shipped soup on the shipping bar (fp32 target, all 80 first turns) and as
# cpu-avx512.yaml serves it (first 20). Run 35's records are the base: their rows (the shipped soup and earlier, run
# 35) are copied, so only the new soup decodes. From the repository root, after run 36's train stage:
#   bash docs/results/soup35_36_2026-12-07/run.sh [soup tau served eval]   (no stage: the first three; ~25 + ~6 min
#   alone on the family-25 EPYC)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns), into
# docs/results/draft_head_report_soup35_36.json, as the run heads' reports carry it (run 2026-12-07 on an AMD EPYC
# family 26 model 2, when the soup shipped, by the same code inline as in ../soup_2026-12-06/run.sh; `compare_heads.py
# eval` then reproduced the report's summary from those runs).
# Every stage resumes: compare_heads keeps each decoded prompt. tau and served were run by an inline copy of
# continue_head.sh's judge, before --head existed; it made the same compare_heads calls.
set -euo pipefail
D=docs/results/soup35_36_2026-12-07
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
SOUP=$W/soup35_36/head
stages=("$@")
[ $# -gt 0 ] || stages=(soup tau served)
for stage in "${stages[@]}"; do
  case $stage in
    soup) $PY tools/average_heads.py --output $SOUP docs/results/run35_2026-12-07/head $W/run36/head ;;
    tau|served) bash tools/continue_head.sh --head soup35_36=$SOUP --from soup33_34=docs/results/soup_2026-12-06/head \
                    --record $D --baseline-record docs/results/run35_2026-12-07 \
                    --served-format int4vnni/int8vnni+int8vnni $stage ;;
    eval) $PY tools/compare_heads.py eval docs/results/draft_head_report_soup35_36.json $D/head ;;
    *) echo "run.sh: unknown stage '$stage' (soup, tau, served, eval)" >&2; exit 2 ;;
  esac
done
