#!/usr/bin/env bash
# A/B of --lm-head-basis on one small data set (seed 28, a quarter of run 15's mix), both arms continuing the
# shipped head (run 27) for one epoch with the continued runs' recipe; then each head teacher-forced on the
# held-out seed-12 answers and the benchmarks' (confidence_gap.py, answers reused), and EAGLE-2's tree tau on the
# first 20 first turns of mt_bench and humaneval (compare_heads.py decode, run 27's rows reused from run 28's record).
# From the repository root: bash docs/results/lm_head_basis_ab_2026-12-05/run.sh   (~60 min on 2 cores)
set -euo pipefail
W=${W:-~/.cache/sglang_cast/rebuild}
R=docs/results/lm_head_basis_ab_2026-12-05
CG=docs/results/confidence_gap_2026-12-05
PY=.venv/bin/python
DATA="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64 --seed 28
      --self-instruct 75 --doc-prompts 40 --template-prompts 140 --task-prompts 200 --soft-top-k 16"
RECIPE="--lr 2.5e-4 --warmup-steps 20 --epochs 1 --soft-labels 0.5 --ttt-steps 7"
$PY tools/train_draft.py $DATA --until responses --work-dir $W/ab29
for arm in plain basis; do
  mkdir -p $W/ab29_$arm
  for stage in self_instruct prompts responses; do
    [ -e $W/ab29_$arm/$stage ] || cp -al $W/ab29/$stage $W/ab29_$arm/$stage
  done
  extra=$([ $arm = basis ] && echo "--lm-head-basis 1.0" || true)
  $PY tools/train_draft.py $DATA $RECIPE $extra --until train --work-dir $W/ab29_$arm --output $W/ab29_$arm/head \
      --init-head sglang_cast/assets/smollm2-135m-eagle 2>&1 | tr '\r' '\n' | grep -v '^train: ' > $R/train_$arm.log
  tail -1 $W/ab29_$arm/train/log.jsonl > $R/val_$arm.json
done
for arm in plain basis; do
  mkdir -p $R/$arm && cp $CG/answers.json $R/$arm/
  $PY $CG/confidence_gap.py --head $W/ab29_$arm/head --out $R/$arm > /dev/null 2>&1
  $PY $CG/frequency.py $R/$arm > $R/$arm/frequency.md
done
for b in mt_bench humaneval; do
  [ -f $R/$b.json ] || $PY - docs/results/run28_2026-12-05/$b.json $R/$b.json <<'PYEOF'
import json, sys  # run 27's rows of the first 20 prompts, from run 28's record (decoded on this EPYC, 2026-12-04)
src = json.load(open(sys.argv[1]))
rows = {i: {"run27": src["prompts"][i]["run27"]} for i in map(str, range(20))}
json.dump({"benchmark": src["benchmark"], "heads": {"run27": src["heads"]["run27"]}, "prompts": rows},
          open(sys.argv[2], "w"))
PYEOF
  $PY tools/compare_heads.py decode $R/$b.json $b --prompts 0:20 run27=docs/results/run27_2026-12-04/head \
      plain=$W/ab29_plain/head basis=$W/ab29_basis/head 2>&1 | tr '\r' '\n' | grep -v 'prompt/s\]$' > $R/$b.log || true
done
