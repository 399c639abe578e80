#!/bin/bash
# Replay against live τ before and after the recording commits through its lookup branch
# (record: docs/results/2026-11-30_replay_sampling_amx.md).  "after" records 16 prompts at
# B = 1 into a fresh database with this commit's collect, then decodes them live.  "before"
# reads a collect run made before the change (trace format 2): run it with this clone checked
# out at 3a4ef32 and this folder copied back in (a trace's head id is the head's resolved path,
# so the same clone), passing after.log's JSON as LIVE_JSON to skip decoding again.
set -e
cd "$(dirname "$0")/../../.."
D=docs/results/replay_sampling_2026-11-30
M=~/.cache/sglang_cast/models/SmolLM2-135M-Instruct
H=sglang_cast/assets/smollm2-135m-eagle
P=docs/results/sglang_cpu/2026-11-30_amx/cpu.yaml
case "$1" in
before)  # $2: the database of the SGLang record's collect (runs 79ec6edc, af17e747); $3: LIVE_JSON
  .venv/bin/python $D/replay_vs_live.py "$2" 79ec $P $3 > $D/before.log ;;
after)
  DB=${2:-/tmp/replay_sampling.db}
  .venv/bin/python -m autotune collect --model-path $M --draft-path $H --device cpu --dtype float32 \
    --threads 2 --num-prompts 16 --max-new-tokens 64 --batch-size 1 --db $DB --quiet
  RUN=$(sqlite3 $DB "select run_id from traces order by id desc limit 1" | cut -c1-8)
  .venv/bin/python $D/replay_vs_live.py $DB $RUN $P > $D/after.log ;;
*) echo "usage: run.sh before DB | after [DB]"; exit 2 ;;
esac
# The SGLang tune of docs/results/sglang_cpu/2026-11-30_amx re-run on format-3 traces (same
# 16 prompts at B = 1 and 4, same flags; sglang_collect.log, sglang_retune.log, sglang_cpu_retuned.yaml):
#   bash docs/results/sglang_cpu/2026-11-30_amx/run.sh collect   (then tune with --output into this folder)
