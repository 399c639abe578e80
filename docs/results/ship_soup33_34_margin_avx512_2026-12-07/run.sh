#!/bin/bash
# The soup's ship, second tune (2026-12-07): the tune, ab and bench stages of ../ship_soup33_34_avx512_2026-12-07/
# again, on the same traces and tables, with `tune --incumbent-margin 0.03` (the default since this day): the replaced
# profile's tree is kept in a bucket unless the best trial replays more than 3 % above it. 2-core AMD EPYC (family 25,
# model 17: AVX-512 + VNNI + BF16, no AMX). Run from a worktree at /tmp/shipsoup (the path the tables and traces are
# keyed by) with the soup's head in the assets and run 32's profile in profiles/cpu-avx512.yaml:
# bash docs/results/ship_soup33_34_margin_avx512_2026-12-07/run.sh [tune|ab|bench] (no stage: all three).
cd "$(dirname "$0")/../../.."
[ $# -gt 0 ] || set -- tune ab bench
exec bash tools/retune_profile.sh --record docs/results/ship_soup33_34_margin_avx512_2026-12-07 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni "$@"
