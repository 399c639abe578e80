#!/usr/bin/env bash
# The scale S of --lm-head-basis on run.sh's small data set (seed 28, built by run.sh's first command): the basis
# arm again at S = 24 (B's rows unit norm) and S = 64, one epoch (48 steps) each, run 27 continued; the last
# validation row of each goes to val_basis$S.json. From the repository root (~12 min on 2 cores, 2026-12-05).
set -euo pipefail
W=${W:-~/.cache/sglang_cast/rebuild}
R=docs/results/lm_head_basis_ab_2026-12-05
DATA="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64 --seed 28
      --self-instruct 75 --doc-prompts 40 --template-prompts 140 --task-prompts 200 --soft-top-k 16"
RECIPE="--lr 2.5e-4 --warmup-steps 20 --epochs 1 --soft-labels 0.5 --ttt-steps 7"
for S in 24 64; do
  mkdir -p $W/ab29_b$S
  for stage in self_instruct prompts responses; do
    [ -e $W/ab29_b$S/$stage ] || cp -al $W/ab29/$stage $W/ab29_b$S/$stage
  done
  .venv/bin/python tools/train_draft.py $DATA $RECIPE --lm-head-basis $S --until train --work-dir $W/ab29_b$S \
      --output $W/ab29_b$S/head --init-head sglang_cast/assets/smollm2-135m-eagle 2>&1 | tr '\r' '\n' \
      | grep -v '^train: ' > $R/train_basis$S.log
  tail -1 $W/ab29_b$S/train/log.jsonl > $R/val_basis$S.json
done
