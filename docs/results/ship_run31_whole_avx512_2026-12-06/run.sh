#!/bin/bash
# Run 31's ship, second try (2026-12-06): the first try (../ship_run31_avx512_2026-12-06/) tuned B = 1 on 40
# iterations sampled from 16 tuning prompts and lost its ab stage to the shipped profile. Here B = 1 is recorded on
# 48 tuning prompts, the tune replays every recorded iteration of each bucket, with 150 trials a bucket; all else as
# the first try. 2-core AMD EPYC (family 25, model 17: AVX-512 + VNNI + BF16, no AMX). Run from the repository root
# with run 31's head in sglang_cast/assets/smollm2-135m-eagle/ and run 30-q's profile in profiles/cpu-avx512.yaml:
# bash docs/results/ship_run31_whole_avx512_2026-12-06/run.sh [collect|profile|tune|ab|bench] (no stage: all five).
cd "$(dirname "$0")/../../.."
exec bash tools/retune_profile.sh --record docs/results/ship_run31_whole_avx512_2026-12-06 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni \
    --b1-prompts 48 --max-traces 100000 --trials 150 "$@"
