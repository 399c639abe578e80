#!/usr/bin/env bash
# #48 item 4: head run 21, the shipped head's next continued run with the recipe the 2026-12-01 A/B kept
# (7 training-time-test steps, no --vocab-swap). It continues run 20 (run 15 + seed 19's half mix, TTT 7,
# no swap: docs/results/ttt_ab_2026-12-01/run.sh noswap) on seed 20 with run 15's whole mix, then judges
# it prompt by prompt against runs 15 and 20 on all 80 first turns of each benchmark.
# Resumable: rerun a stage after an interruption. From the repository root:
#   bash docs/results/run21_2026-12-01/run.sh [data|train|tau|gap]...
set -euo pipefail
D=docs/results/run21_2026-12-01
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
RUN15=$W/run15/head  # the head shipped before (sglang_cast/assets/smollm2-135m-eagle at c443ad1a096e)
COMMON="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64"
MIX="--self-instruct 300 --doc-prompts 150 --template-prompts 550 --task-prompts 800"
RECIPE="--lr 5e-4 --warmup-steps 20 --epochs 2 --soft-top-k 16 --soft-labels 0.5 --ttt-steps 7"
quiet() { grep -a -v USDT || true; }
for stage in ${@:-data train tau gap}; do
  case $stage in
    data) $PY tools/train_draft.py $COMMON --until responses --work-dir $W/run21 --seed 20 $MIX --soft-top-k 16 \
              2>&1 | quiet ;;
    train) $PY tools/train_draft.py $COMMON --work-dir $W/run21 --output $W/run21/head --seed 20 \
               --init-head $W/ttt7_noswap/head $RECIPE $MIX 2>&1 | quiet | tee $D/train.log
           cp $W/run21/report.json docs/results/draft_head_report_run21.json ;;
    tau) $PY $D/per_prompt.py $D/humaneval.json humaneval 0 80 shipped=$RUN15 run20=$W/ttt7_noswap/head \
             run21=$W/run21/head 2>&1 | quiet | tee $D/humaneval.log
         $PY $D/per_prompt.py $D/mt_bench.json mt_bench 0 80 shipped=$RUN15 run21=$W/run21/head 2>&1 | quiet \
             | tee $D/mt_bench.log ;;
    gap) $PY tools/draft_gap.py --head $W/run21/head --held-out $W/heldout --ttt-steps 7 --tau-prompts 20 \
             --json $D/gap_run21.json 2>&1 | quiet | tee $D/gap_run21.log ;;
  esac
done
