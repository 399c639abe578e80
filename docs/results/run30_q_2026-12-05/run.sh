#!/usr/bin/env bash
# Run 30-q (2026-12-05): the A/B arm of run 30 whose answers come from the served target. Run 29's head continued
# on seed 30's prompts (run 30's, hard-linked) answered by the target in int4vnni/int8vnni (the shipped
# cpu-avx512.yaml's format: its own greedy answers, features and soft labels), run 30's recipe otherwise.
# Then tau (EAGLE-2's tree, full pool, first 20 first turns) of run 29, run 30 and run 30-q with the target as
# served (int4vnni/int8vnni+int8vnni) and in fp32: ../served_format_tau_2026-12-05/tau_by_format.py.
# From the repository root, after run 30's data stage (~10 min answers, ~37 train, ~2 x 12 tau on 2 idle cores).
set -euo pipefail
A="--seed 30 --from run29=docs/results/run29_2026-12-05/head --record docs/results/run30_q_2026-12-05
   --data-from 30 --target-format int4vnni/int8vnni"
bash tools/continue_head.sh --run 30_q $A data
bash tools/continue_head.sh --run 30_q $A --lm-head-basis 24 --skip-eval train
