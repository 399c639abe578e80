#!/bin/bash
# The soup's ship (2026-12-07): re-tune profiles/cpu-avx512.yaml on the soup of runs 33 and 34 (digest 4e96f3b07a0e,
# docs/results/soup_2026-12-06/head/) with tools/retune_profile.sh's defaults (B = 1 on 48 tuning prompts, every
# recorded iteration replayed, 150 trials a bucket, the replaced profile as --incumbent) and judge it against the
# shipped profile (run 32's tune), both on the soup. 2-core AMD EPYC (family 25, model 17: AVX-512 + VNNI + BF16, no
# AMX). Run from a worktree at /tmp/shipsoup (the path the tables and traces are keyed by) with the soup's head in
# sglang_cast/assets/smollm2-135m-eagle/ and run 32's profile in profiles/cpu-avx512.yaml:
# bash docs/results/ship_soup33_34_avx512_2026-12-07/run.sh [collect|profile|tune|ab|bench] (no stage: all five).
cd "$(dirname "$0")/../../.."
exec bash tools/retune_profile.sh --record docs/results/ship_soup33_34_avx512_2026-12-07 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni "$@"
