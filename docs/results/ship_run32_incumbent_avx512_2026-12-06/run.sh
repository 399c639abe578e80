#!/bin/bash
# Run 32's ship re-tuned with `tune --incumbent` (2026-12-06): the tune stage of ../ship_run32_avx512_2026-12-06/ again,
# on the same traces and tables, with the replaced profile (run 31's tune) as the incumbent, then its ab stage against
# that profile. 2-core AMD EPYC (family 25, model 17: AVX-512 + VNNI + BF16, no AMX). Run from a worktree at
# /tmp/ship32 (the path the ship's tables and traces are keyed by) with run 32's head in the assets:
# bash docs/results/ship_run32_incumbent_avx512_2026-12-06/run.sh [tune|ab] (no stage: both).
cd "$(dirname "$0")/../../.."
[ $# -gt 0 ] || set -- tune ab
exec bash tools/retune_profile.sh --record docs/results/ship_run32_incumbent_avx512_2026-12-06 \
    --profile docs/results/ship_run31_whole_avx512_2026-12-06/cpu-avx512.yaml \
    --formats int4vnni/int8vnni+int8vnni "$@"
