#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 37 and 38 (both continue the shipped soup of runs 35 and 36, on
# seeds 37 and 38, with the int4 answers + bf16 training recipe) judged against the shipped soup on the shipping bar
# (fp32 target, all 80 first turns) and as cpu-avx512.yaml serves it (first 20). The soup of 35 and 36's records are
# the base: their rows are copied, so only the new soup decodes. From the repository root, after both runs' train:
#   bash docs/results/soup37_38_2026-12-07/run.sh [soup tau served eval]   (no stage: the first three)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns), into
# docs/results/draft_head_report_soup37_38.json.
# Every stage resumes: compare_heads keeps each decoded prompt.
set -euo pipefail
D=docs/results/soup37_38_2026-12-07
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
SOUP=$W/soup37_38/head
stages=("$@")
[ $# -gt 0 ] || stages=(soup tau served)
judge() {  # judge BENCHMARK FILE PROMPTS [compare_heads flag...]
  local b=$1 file=$2 prompts=$3; shift 3
  [ -f $D/$file.json ] || cp docs/results/soup35_36_2026-12-07/$file.json $D/$file.json
  $PY tools/compare_heads.py decode $D/$file.json $b --prompts $prompts "$@" \
      soup35_36=docs/results/soup35_36_2026-12-07/head soup37_38=$SOUP 2>&1 \
      | grep -a -v USDT | tr '\r' '\n' | grep -a -v '%|\|^\s*$' | tee -a $D/$file.log || true
  $PY tools/compare_heads.py summary $D/$file.json --baseline soup35_36 > $D/${file}_summary.md
}
for stage in "${stages[@]}"; do
  case $stage in
    soup) $PY tools/average_heads.py --output $SOUP $W/run37/head $W/run38/head ;;
    tau) for b in humaneval mt_bench; do judge $b $b 0:80; done ;;
    served) for b in humaneval mt_bench; do judge $b served_$b 0:20 --weight-format int4vnni/int8vnni+int8vnni; done ;;
    eval) $PY tools/compare_heads.py eval docs/results/draft_head_report_soup37_38.json $SOUP ;;
    *) echo "run.sh: unknown stage '$stage' (soup, tau, served, eval)" >&2; exit 2 ;;
  esac
done
