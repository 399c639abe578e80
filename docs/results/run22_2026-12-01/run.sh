#!/usr/bin/env bash
# #48 item 4: head run 22, the shipped head (run 21) continued by one run with run 21's recipe ($NEXT of
# docs/draft_head.md: 7 training-time-test steps, no --vocab-swap) and run 15's mix on the next unused seed (21).
# `tau` judges it prompt by prompt against run 21 on all 80 first turns of each benchmark, starting from run 21's
# own per-prompt results (resumable per prompt and head: only run 22's rows are computed).
# Resumable: rerun a stage after an interruption. From the repository root:
#   bash docs/results/run22_2026-12-01/run.sh [data|train|tau|gap]...
set -euo pipefail
D=docs/results/run22_2026-12-01
R21=docs/results/run21_2026-12-01
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
RUN21=$W/run21/head  # the shipped head (sglang_cast/assets/smollm2-135m-eagle at 95430003bbef)
COMMON="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64"
MIX="--self-instruct 300 --doc-prompts 150 --template-prompts 550 --task-prompts 800"
NEXT="--lr 5e-4 --warmup-steps 20 --epochs 2 --soft-top-k 16 --soft-labels 0.5 --ttt-steps 7"
quiet() { grep -a -v USDT || true; }
bars() { tr '\r' '\n' | grep -a -v '%|\|^\s*$' || true; }  # tqdm redraws its bars with \r: drop them from the logs
for stage in ${@:-data train tau gap}; do
  case $stage in
    data) $PY tools/train_draft.py $COMMON --until responses --work-dir $W/run22 --seed 21 $MIX --soft-top-k 16 \
              2>&1 | quiet ;;
    train) $PY tools/train_draft.py $COMMON --work-dir $W/run22 --output $W/run22/head --seed 21 \
               --init-head $RUN21 $NEXT $MIX 2>&1 | quiet | bars | tee $D/train.log
           cp $W/run22/report.json docs/results/draft_head_report_run22.json ;;
    tau) for b in humaneval mt_bench; do
           [ -f $D/$b.json ] || cp $R21/$b.json $D/$b.json  # run 21's rows, measured on this EPYC
           $PY $R21/per_prompt.py $D/$b.json $b 0 80 run21=$RUN21 run22=$W/run22/head 2>&1 | quiet | bars | tee $D/$b.log
         done ;;
    gap) $PY tools/draft_gap.py --head $W/run22/head --held-out $W/heldout --ttt-steps 7 --tau-prompts 20 \
             --json $D/gap_run22.json 2>&1 | quiet | bars | tee $D/gap_run22.log ;;
  esac
done
