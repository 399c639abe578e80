#!/usr/bin/env bash
# #48 item 3: does a continued run gain more at half the peak learning rate? Run 23 (run 22 continued on seed 22's
# data at lr 5e-4, the recipe since run 11) measured level with run 22; this arm trains from the same head on the
# same data (run 23's prompts, answers and vocabulary, hard-linked) at lr 2.5e-4, nothing else changed, and its
# eval stage (first 20 first turns of each benchmark, EAGLE-2's tree, full pool) is read against run 23's and
# run 22's (run 22's head from its work dir: the assets hold this arm's since it shipped). Resumable; from the repository root: bash docs/results/lr_ab_2026-12-01/run.sh [train|tau]...
set -euo pipefail
D=docs/results/lr_ab_2026-12-01
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
COMMON="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64"
MIX="--self-instruct 300 --doc-prompts 150 --template-prompts 550 --task-prompts 800"
HALF_LR="--lr 2.5e-4 --warmup-steps 20 --epochs 2 --soft-top-k 16 --soft-labels 0.5 --ttt-steps 7"
for stage in ${@:-train}; do
  case $stage in
    train) mkdir -p $W/run23_lr
           for data in self_instruct prompts responses vocab; do
             [ -e $W/run23_lr/$data ] || cp -al $W/run23/$data $W/run23_lr/$data
           done
           $PY tools/train_draft.py $COMMON --work-dir $W/run23_lr --output $W/run23_lr/head --seed 22 \
               --init-head $W/run22/head $HALF_LR $MIX 2>&1 | grep -a -v USDT \
               | tr '\r' '\n' | grep -a -v '%|\|^\s*$' | tee -a $D/train.log
           cp $W/run23_lr/report.json docs/results/draft_head_report_run23_lr.json ;;
    tau) for b in humaneval mt_bench; do  # all 80 first turns, next to run 22's and run 23's rows
           [ -f $D/$b.json ] || cp docs/results/run23_2026-12-01/$b.json $D/$b.json
           $PY tools/compare_heads.py decode $D/$b.json $b --prompts 0:80 run22=$W/run22/head \
               run23_lr=$W/run23_lr/head 2>&1 | grep -a -v USDT | tr '\r' '\n' | grep -a -v '%|\|^\s*$' > $D/$b.log
           $PY tools/compare_heads.py summary $D/$b.json --baseline run22 > $D/${b}_summary.md
         done ;;
  esac
done
