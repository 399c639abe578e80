#!/bin/bash
# Waits for run 12's pipeline, judges its head (draft_gap; its tau comes from the eval
# stage), then trains the grown-vocabulary A/B on the same data (run12g_vocab16k holds
# hard links to run 12's prompts, self_instruct and responses stages) and judges it.
# As run on 2026-11-27 the script was stopped after starting run 12g (the session's time
# left no room for the 20 min of --benchmark-tau 20); run 12g's draft_gap ran by hand,
# without --benchmark-tau, as the results file says.
W=~/.cache/sglang_cast
R=/work/main/docs/results/world_topics_2026-11-27
PY=/work/main/.venv/bin/python
cd /work/run12g
while pgrep -f "sglang_cast.training --benchmark-dir" >/dev/null; do sleep 20; done
date -u +"%F %H:%M UTC run 12 done; judge start" >> $R/judge.log
PYTHONPATH=/work/run12g $PY tools/draft_gap.py --head $W/run12_words/head --held-out $W/heldout_s12 \
    --json $R/gap_run12_head.json > $R/gap_run12_head.md 2>> $R/judge.err
date -u +"%F %H:%M UTC run 12 judged; run 12g start" >> $R/judge.log
$PY -m sglang_cast.training --benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 \
    --gen-batch 64 --work-dir $W/run12g_vocab16k --output $W/run12g_vocab16k/head --seed 15 \
    --init-head $W/run11_mix/head --lr 5e-4 --warmup-steps 20 --epochs 2 \
    --self-instruct 300 --doc-prompts 150 --template-prompts 550 --task-prompts 800 \
    --soft-top-k 16 --soft-labels 0.5 --vocab-swap 500 --vocab-grow 8192 --until train > /tmp/run12g.log 2>&1
date -u +"%F %H:%M UTC run 12g trained; judge start" >> $R/judge.log
PYTHONPATH=/work/run12g $PY tools/draft_gap.py --head $W/run12g_vocab16k/head --held-out $W/heldout_s12 \
    --benchmark-tau 20 --json $R/gap_run12g_head.json > $R/gap_run12g_head.md 2>> $R/judge.err
date -u +"%F %H:%M UTC run 12g judged" >> $R/judge.log
