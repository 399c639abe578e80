#!/usr/bin/env bash
# Replay's resolution against the live ab's, for run 32's B <= 1 trees (2026-12-06). From the repository root:
#   bash docs/results/replay_noise_2026-12-06/run.sh [replay|live]   (no stage: both; ~10 + ~12 min alone)
# replay: replay_halves.py (needs run 32's ship in the autotune DB: setup d4904d23d78a).
# live:   one interleaved bench at B = 1, 9 rounds, 16 prompts x 32 tokens of each benchmark: the shipped profile
#         (run 32's tune), a byte copy of it under another name (an A/A pair: the live noise floor), the replaced
#         profile (run 31's tune, top-k 2) and the re-tune with --incumbent (top-k 3), all on run 32's head.
set -euo pipefail
D=docs/results/replay_noise_2026-12-06
stages=("$@")
[ $# -gt 0 ] || stages=(replay live)
for stage in "${stages[@]}"; do
  case $stage in
    replay) .venv/bin/python $D/replay_halves.py 2>&1 | tee $D/replay_halves.log ;;
    live)
      copy=$(mktemp -d)/cpu-avx512-copy.yaml
      cp profiles/cpu-avx512.yaml "$copy"
      for ds in mt_bench humaneval; do
        .venv/bin/python tools/bench.py --methods vanilla,cast --profile profiles/cpu-avx512.yaml \
          --against-profile "$copy" \
          --against-profile docs/results/ship_run31_whole_avx512_2026-12-06/cpu-avx512.yaml \
          --against-profile docs/results/ship_run32_incumbent_avx512_2026-12-06/cpu-avx512.yaml \
          --dataset datasets/$ds.jsonl --num-prompts 16 --max-new-tokens 32 --threads 2 --batch-size 1 --rounds 9 \
          --json $D/live_$ds.json --markdown $D/live_$ds.md 2>&1 | tee $D/live_$ds.log
      done ;;
    *) echo "run.sh: unknown stage '$stage' (replay, live)" >&2; exit 2 ;;
  esac
done
