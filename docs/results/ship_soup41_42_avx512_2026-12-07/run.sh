#!/bin/bash
# Shipping the soup of runs 41 and 42 (2026-12-07): `profiles/cpu-avx512.yaml` re-tuned on its traces, then judged
# against the replaced profile (the soup of runs 39 and 40's, tuned on this EPYC this afternoon) and against
# plain decoding. 2-core AMD EPYC family 26 model 2 (AVX-512 + VNNI + BF16, no AMX). Run from a worktree at /tmp/wt
# (the path the tables and traces are keyed by) with the soup's head (docs/results/soup41_42_2026-12-07/head/) in
# sglang_cast/assets/smollm2-135m-eagle/ and the replaced profile in profiles/cpu-avx512.yaml:
# bash docs/results/ship_soup41_42_avx512_2026-12-07/run.sh [collect|profile|tune|ab|bench] (no stage: all five).
cd "$(dirname "$0")/../../.."
[ $# -gt 0 ] || set -- collect profile tune ab bench
exec bash tools/retune_profile.sh --record docs/results/ship_soup41_42_avx512_2026-12-07 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni "$@"
