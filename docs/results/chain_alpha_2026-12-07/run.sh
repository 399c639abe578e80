#!/usr/bin/env bash
# Why chain α on mt_bench stays at ~0.50 while tree τ rises (issue #48, Next 2): three heads along the line (run 32,
# the soup of runs 33+34, the shipped soup of runs 41+42) scored by tools/draft_gap.py on the same data: the 80
# first turns of each benchmark (the fp32 target's greedy answers, 128 tokens) and held-out data of the training kind
# no run trained on (seed 12, stopped after the responses stage). draft_gap's confidence table gives the draft's
# teacher-forced step-0 recall of the target's token at top 1 / 2 / 4 / 10 by bin of the target's own confidence.
# Repository root: bash docs/results/chain_alpha_2026-12-07/run.sh (oov_bins.py last). With THREADS=1 beside
# a training run on a 2-core EPYC: held-out data 11 min, the three heads 21 min (2026-12-07).
set -euo pipefail
HERE=docs/results/chain_alpha_2026-12-07
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
$PY tools/train_draft.py --until responses --work-dir $W/heldout --seed 12 --self-instruct 120 --doc-prompts 100 \
    --template-prompts 100 --task-prompts 120 --response-tokens 192 --soft-top-k 16 --threads ${THREADS:-2} 2>&1 | tr '\r' '\n' |
    grep -v "it/s\]\|s/it\]\|tok/s\]\|answer/s\]\|s/answer\]\|^\s*$\|\[A$" > $HERE/heldout.log
for head in run32=docs/results/run32_2026-12-06/head soup33_34=docs/results/soup_2026-12-06/head \
            soup41_42=docs/results/soup41_42_2026-12-07/head; do
  name=${head%%=*}
  [ -f $HERE/gap_$name.json ] && continue  # resumable: a finished head is kept
  $PY tools/draft_gap.py --head "${head#*=}" --held-out $W/heldout --ttt-steps 4 --threads ${THREADS:-2} \
      --json $HERE/gap_$name.json 2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]\|tok/s\]\|^\s*$\|\[A$" > $HERE/gap_$name.log
done
$PY $HERE/oov_bins.py docs/results/soup41_42_2026-12-07/head $W/heldout > $HERE/oov_bins.log  # the heads share one vocab
