#!/usr/bin/env bash
# #48 item 3: training-time-test steps 7 (EAGLE-3's) against 4 (ours), continuing the
# shipped head on the same new data (seed 19, half of run 15's mix), judged on held-out
# teacher-forced accuracy at unrolled steps 0-6 and EAGLE-2's tree τ on held-out prompts
# (seed 12: neither training nor benchmark data). Resumable: rerun after an interruption.
# From the repository root: bash docs/results/ttt_ab_2026-12-01/run.sh [data|train|gap]...
set -euo pipefail
D=docs/results/ttt_ab_2026-12-01
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
SHIPPED=sglang_cast/assets/smollm2-135m-eagle
COMMON="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64"
MIX="--self-instruct 150 --doc-prompts 75 --template-prompts 275 --task-prompts 400"
LAST="--lr 5e-4 --warmup-steps 20 --epochs 2 --soft-top-k 16 --soft-labels 0.5 --vocab-swap 500"
quiet() { grep -a -v USDT || true; }
data() {
  $PY tools/train_draft.py --until responses --work-dir $W/heldout --seed 12 --self-instruct 120 \
      --doc-prompts 100 --template-prompts 100 --task-prompts 120 --response-tokens 192 --soft-top-k 16 2>&1 | quiet
}
train() {  # train N: continue the shipped head with --ttt-steps N; the data stages are shared with ttt4
  local dir=$W/ttt$1
  if [ "$1" != 4 ]; then
    mkdir -p $dir
    for s in self_instruct prompts responses vocab; do [ -e $dir/$s ] || ln -s $W/ttt4/$s $dir/$s; done
  fi
  $PY tools/train_draft.py $COMMON --until train --work-dir $dir --output $dir/head --seed 19 \
      --init-head $SHIPPED $LAST $MIX --ttt-steps $1 2>&1 | quiet
  cp $dir/train/meta.json $D/train_meta_ttt$1.json
}
noswap() {  # TTT 7 without --vocab-swap: the same data (its own vocab stage: the shipped head's vocabulary kept)
  local dir=$W/ttt7_noswap
  mkdir -p $dir
  for s in self_instruct prompts responses; do [ -e $dir/$s ] || ln -s $W/ttt4/$s $dir/$s; done
  $PY tools/train_draft.py $COMMON --until train --work-dir $dir --output $dir/head --seed 19 \
      --init-head $SHIPPED ${LAST/--vocab-swap 500/} $MIX --ttt-steps 7 2>&1 | quiet
  cp $dir/train/meta.json $D/train_meta_ttt7_noswap.json
}
gap() {  # gap NAME HEAD [FLAGS]: held-out accuracy at unrolled steps 0-6 and τ on 20 held-out prompts
  $PY tools/draft_gap.py --head $2 --held-out $W/heldout --ttt-steps 7 --tau-prompts 20 ${3:-} --json $D/gap_$1.json \
      2>&1 | quiet | tee $D/gap_$1.log
}
bench() {  # bench NAME HEAD: the same, plus τ on the first 20 prompts of each benchmark (the eval stage's procedure)
  gap $1_bench $2 "--benchmark-tau 20"
}
for stage in ${@:-data train gap}; do
  case $stage in
    data) data ;;
    train) train 4; train 7 ;;
    gap) gap shipped $SHIPPED; gap ttt4 $W/ttt4/head; gap ttt7 $W/ttt7/head ;;
    bench) bench ttt7 $W/ttt7/head; bench shipped $SHIPPED; bench ttt4 $W/ttt4/head ;;
    noswap) noswap; bench ttt7_noswap $W/ttt7_noswap/head ;;
  esac
done
