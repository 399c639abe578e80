#!/usr/bin/env bash
# #48 item 4: head run 23, the shipped head (run 22) continued by one more run of the same recipe ($NEXT of
# docs/draft_head.md: 7 training-time-test steps, no --vocab-swap) and run 15's mix on the next unused seed (22).
# Runs 21 and 22 each added ~+0.025 tau on all 80 first turns of both benchmarks; this checks that the next holds.
# `tau` judges it prompt by prompt against run 22 on all 80 first turns of each benchmark, starting from run 22's
# per-prompt results (resumable per prompt and head: only run 23's rows are computed).
# Resumable (training checkpoints every 200 steps): rerun a stage after an interruption. From the repository root:
#   bash docs/results/run23_2026-12-01/run.sh [data|train|tau|gap]...   (data ~20 min, train ~32 + eval ~9,
#   tau ~2 x 9, gap ~9 on the AVX-512 EPYC)
set -euo pipefail
D=docs/results/run23_2026-12-01
R21=docs/results/run21_2026-12-01  # per_prompt.py and summarise.py live there
R22=docs/results/run22_2026-12-01
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
RUN22=sglang_cast/assets/smollm2-135m-eagle  # the shipped head (run 22, weights digest 966ab16ae7d8)
COMMON="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64"
MIX="--self-instruct 300 --doc-prompts 150 --template-prompts 550 --task-prompts 800"
NEXT="--lr 5e-4 --warmup-steps 20 --epochs 2 --soft-top-k 16 --soft-labels 0.5 --ttt-steps 7"
quiet() { grep -a -v USDT || true; }
bars() { tr '\r' '\n' | grep -a -v '%|\|^\s*$' || true; }  # tqdm redraws its bars with \r: drop them from the logs
for stage in ${@:-data train tau gap}; do
  case $stage in
    data) $PY tools/train_draft.py $COMMON --until responses --work-dir $W/run23 --seed 22 $MIX --soft-top-k 16 \
              2>&1 | quiet ;;
    train) $PY tools/train_draft.py $COMMON --work-dir $W/run23 --output $W/run23/head --seed 22 \
               --init-head $RUN22 $NEXT $MIX 2>&1 | quiet | bars | tee $D/train.log
           cp $W/run23/report.json docs/results/draft_head_report_run23.json ;;
    tau) for b in humaneval mt_bench; do
           [ -f $D/$b.json ] || cp $R22/$b.json $D/$b.json  # runs 15, 21 and 22's rows, measured on this EPYC
           $PY $R21/per_prompt.py $D/$b.json $b 0 80 run22=$RUN22 run23=$W/run23/head 2>&1 | quiet | bars | tee $D/$b.log
         done ;;
    gap) $PY tools/draft_gap.py --head $W/run23/head --held-out $W/heldout --ttt-steps 7 --tau-prompts 20 \
             --json $D/gap_run23.json 2>&1 | quiet | bars | tee $D/gap_run23.log ;;
  esac
done
