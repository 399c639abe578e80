#!/bin/bash
# Run 32's ship (2026-12-06): re-tune profiles/cpu-avx512.yaml on run 32's own traces with the whole-sample defaults
# of tools/retune_profile.sh (B = 1 on 48 tuning prompts, every recorded iteration replayed, 150 trials a bucket) and
# judge it against the shipped profile (run 31's tune), both on run 32's head. 2-core AMD EPYC (family 25, model 17:
# AVX-512 + VNNI + BF16, no AMX). Run from the repository root with run 32's head in
# sglang_cast/assets/smollm2-135m-eagle/ and run 31's profile in profiles/cpu-avx512.yaml:
# bash docs/results/ship_run32_avx512_2026-12-06/run.sh [collect|profile|tune|ab|bench] (no stage: all five).
cd "$(dirname "$0")/../../.."
exec bash tools/retune_profile.sh --record docs/results/ship_run32_avx512_2026-12-06 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni "$@"
