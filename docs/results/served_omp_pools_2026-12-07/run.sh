#!/usr/bin/env bash
# Served speed before and after the engine is built on a passing thread (server/build_thread.py):
# servers of OLD (a commit, checked out in a worktree) and of this checkout, CAST (live gate off, so
# both serve the same trees) and plain decoding, measured interleaved (ab.py), the same requests
# without a server (anchor.py), what the live calibration sees on fresh servers (live_ratio.py), the load
# benchmark at 1 and 4 clients with the default flags; then the
# one-linear microbenchmark of the cause (pools.py) and a fresh engine's first request (first_request.py).
# Usage (repository root, nothing else running): bash docs/results/served_omp_pools_2026-12-07/run.sh OLD
set -euo pipefail
OLD=$1 HERE=docs/results/served_omp_pools_2026-12-07 PY=.venv/bin/python
git worktree add --force /tmp/served_old "$OLD" >/dev/null && ln -sfn "$PWD/.venv" /tmp/served_old/.venv
cleanup() { pkill -f "launch_server --port 82[0-9][0-9]" || true; rm -f /tmp/served_old/.venv
            git worktree remove --force /tmp/served_old || true; }
trap cleanup EXIT
serve() { (cd "$1" && exec .venv/bin/python -m sglang_cast.launch_server --port "$2" "${@:3}") > "$HERE/server_$2.log" 2>&1 & }
serve /tmp/served_old 8201 --cast-live-gate off; serve . 8202 --cast-live-gate off
serve /tmp/served_old 8203 --speculative-algorithm NONE; serve . 8204 --speculative-algorithm NONE
serve /tmp/served_old 8205; serve . 8206
for port in 8201 8202 8203 8204 8205 8206; do
  until curl -sf "127.0.0.1:$port/health" >/dev/null; do sleep 2; done
done
$PY $HERE/ab.py 5 "cast old=8201" "cast new=8202" "plain old=8203" "plain new=8204" | tee $HERE/ab.log
DATASET=humaneval $PY $HERE/ab.py 5 "cast new=8202" "plain new=8204" | tee $HERE/ab_humaneval.log
$PY $HERE/anchor.py 5 2>/dev/null | tee $HERE/anchor.log
pkill -f "launch_server --port 820[56]"; sleep 5; serve /tmp/served_old 8205; serve . 8206  # fresh windows for live_ratio.py
for port in 8205 8206; do until curl -sf "127.0.0.1:$port/health" >/dev/null; do sleep 2; done; done
(cd $HERE && ../../../$PY live_ratio.py old=8205 new=8206) | tee $HERE/live_ratio.log
for round in 1 2; do
  for arm in old=8205 new=8206; do
    echo "== round $round, ${arm%%=*} (default flags)"
    $PY tools/bench_serving.py --port "${arm#*=}" --max-concurrency 1 4 --num-prompts 16 \
        --random-input-len 32 --random-output-len 64 --max-duration 60
  done
done | tee $HERE/bench_serving.log
for run in 1 2; do $PY $HERE/pools.py 2>/dev/null; $PY $HERE/pools.py passing 2>/dev/null; done | tee $HERE/pools.log
$PY $HERE/first_request.py 2>/dev/null | tee $HERE/first_request.log
