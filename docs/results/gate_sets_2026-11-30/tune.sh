#!/bin/bash
# profiles/cpu.yaml's tune (docs/results/verify_width_amx_2026-11-29/run.sh tune: same flags,
# tables and traces) under the live gate of three prompt slices (--confirm-sets 3, the default
# since 2026-11-30). Writes OUT (default /tmp/cpu_sets.yaml).
set -o pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:-/tmp/cpu_sets.yaml}
DB=${SGLANG_CAST_CACHE:-$HOME/.cache/sglang_cast}/autotune.db
F=int4/int8:dense16:bf16+int8
.venv/bin/cast-autotune tune --gpu cpu --threads 2 --weight-format $F --buckets 1,2,4,8,16,32 --trials 60 --max-traces 40 \
    --top-k 8 --max-depth 6 --max-tokens 32 --confirm-prompts 16 --confirm-sets 3 --confirm-max-new-tokens 32 \
    --live-rounds 3 --db $DB --output $OUT 2>&1 | grep -v "it/s\]$\|s/it\]$"
