#!/bin/bash
# Ship head run 31 (docs/results/2026-12-06_run31_avx512.md) with a profile re-tuned on its traces, on a 2-core
# AMD EPYC (family 25, model 17: AVX-512 + AVX512-VNNI + AVX512-BF16, no AMX), 2026-12-06. Run from the repository
# root with run 31's head in sglang_cast/assets/smollm2-135m-eagle/ and the replaced profile (run 30-q's) still in
# profiles/cpu-avx512.yaml: bash docs/results/ship_run31_avx512_2026-12-06/run.sh [collect|profile|tune|ab|bench]
# (no stage: all five). One draft format, as in run 30-q's ship.
cd "$(dirname "$0")/../../.."
exec bash tools/retune_profile.sh --record docs/results/ship_run31_avx512_2026-12-06 \
    --profile profiles/cpu-avx512.yaml --formats int4vnni/int8vnni+int8vnni "$@"
