#!/usr/bin/env bash
# #48 item 5: host work of a B = 1 step outside its forwards, before and after change.patch (a commit's moved
# cache entries copied one by one on the CPU, the draft's root rows written and read with index_copy_ /
# index_select). Measured no faster in the engine and not kept: docs/results/2026-12-01_host_work_ab_avx512.md.
# profiles/cpu-avx512.yaml, 8 prompts x 32 tokens per dataset, 2 threads, the two checkouts alternating for
# ROUNDS rounds (the machine drifts). From the repository root:
#   git worktree add /tmp/after HEAD && git -C /tmp/after apply $PWD/docs/results/host_work_ab_2026-12-01/change.patch
#   BEFORE=$PWD AFTER=/tmp/after bash docs/results/host_work_ab_2026-12-01/run.sh
set -euo pipefail
S=$PWD/docs/results/host_path_b1_2026-11-29
PY=$PWD/.venv/bin/python
for round in $(seq ${ROUNDS:-3}); do
  for side in before after; do
    tree=$([ $side = before ] && echo "$BEFORE" || echo "$AFTER")
    for ds in humaneval mt_bench; do
      (cd "$tree" && PYTHONPATH="$tree" $PY $S/host_split.py profiles/cpu-avx512.yaml datasets/$ds.jsonl 8 2 vanilla,cast \
         2>&1 | grep -v USDT | sed "s/^/$side round $round $ds: /")
    done
  done
done
