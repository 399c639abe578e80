#!/bin/bash
# Waits for run 11's pipeline, then judges the new and the shipped head with one procedure.
cd /work/wt48
W=~/.cache/sglang_cast
R=docs/results/prompt_mix_2026-11-27
while pgrep -f "sglang_cast.training --benchmark-dir" >/dev/null; do sleep 20; done
date -u +"%F %H:%M UTC judge start" >> $R/judge.log
PYTHONPATH=/work/wt48 .venv/bin/python tools/draft_gap.py --head $W/run11_mix/head --held-out $W/heldout_s12 \
    --json $R/gap_run11_head.json > $R/gap_run11_head.md 2>> $R/judge.err
date -u +"%F %H:%M UTC new head done" >> $R/judge.log
PYTHONPATH=/work/wt48 .venv/bin/python tools/draft_gap.py --head sglang_cast/assets/smollm2-135m-eagle --held-out $W/heldout_s12 \
    --benchmark-tau 20 --json $R/gap_shipped_head.json > $R/gap_shipped_head.md 2>> $R/judge.err
date -u +"%F %H:%M UTC shipped head done" >> $R/judge.log
