#!/usr/bin/env bash
# Re-runs this record's measurements from the repository root, on a quiet CPU (~25 min without the A/B).
# The A/B (BEFORE=<checkout>, ~17 min) compares another checkout against this one: the record's cuts were
# reverted after it (not faster), so re-running it means re-making them in one checkout (the record lists them)
# and copying this directory's scripts into the other.
set -euo pipefail
PY=.venv/bin/python
D=docs/results/host_work_2026-12-05
$PY $D/stages.py cast 3 && $PY $D/stages.py vanilla 3
for m in on off on off; do $PY $D/gc_off.py $m cast 3 | tail -7; done
$PY $D/calls.py
$PY tools/host_work.py --policies cast,vanilla --batch-size 1 --top-k 3 --max-depth 6 --num-verify-tokens 18 --breakdown
$PY $D/torch_calls.py | head -60
.venv/bin/py-spy record --nonblocking -r 1000 -f raw -o /tmp/cast20.raw -- \
    $PY docs/results/host_work_2026-12-04/decode_loop.py cast 20
$PY $D/spy_functions.py /tmp/cast20.raw 0.88 40
if [ -n "${BEFORE:-}" ]; then $PY $D/ab_checkouts.py "$BEFORE" "$PWD" cast 8; fi
