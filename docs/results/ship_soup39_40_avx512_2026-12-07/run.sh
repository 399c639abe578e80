#!/bin/bash
# Shipping the soup of runs 39 and 40 (2026-12-07): `profiles/cpu-avx512.yaml` re-tuned on its traces, then judged
# against the replaced profile (the soup of runs 35 and 36's, tuned on this EPYC this morning) and against
# plain decoding. 2-core AMD EPYC family 26 model 2 (AVX-512 + VNNI + BF16, no AMX). Run from a worktree at /tmp/wt
# (the path the tables and traces are keyed by) with the soup's head (docs/results/soup39_40_2026-12-07/head/) in
# sglang_cast/assets/smollm2-135m-eagle/ and the replaced profile in profiles/cpu-avx512.yaml:
# bash docs/results/ship_soup39_40_avx512_2026-12-07/run.sh [collect|profile|tune|ab|bench] (no stage: all five).
cd "$(dirname "$0")/../../.."
[ $# -gt 0 ] || set -- collect profile tune ab bench
exec bash tools/retune_profile.sh --record docs/results/ship_soup39_40_avx512_2026-12-07 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni "$@"
