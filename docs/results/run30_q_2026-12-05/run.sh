#!/usr/bin/env bash
# Run 30-q (2026-12-05): the A/B arm of run 30 whose answers come from the served target. Run 29's head continued
# on seed 30's prompts (run 30's, hard-linked) answered by the target in int4vnni/int8vnni (the shipped
# cpu-avx512.yaml's format: its own greedy answers, features and soft labels), run 30's recipe otherwise.
# Judged against run 30 (the same prompts, fp32 answers) and run 29: tau (EAGLE-2's tree, full pool) on all 80
# first turns with the fp32 target (the shipping bar: continue_head's tau stage) and on the first 20 with the target
# as served (compare_heads --weight-format int4vnni/int8vnni+int8vnni).
# From the repository root, after run 30's data stage: bash docs/results/run30_q_2026-12-05/run.sh [data|train|tau|served]
# (~30 min answers, ~37 train, ~18 tau, ~20 served on 2 idle cores).
set -euo pipefail
R=docs/results/run30_q_2026-12-05
W=${W:-$HOME/.cache/sglang_cast/rebuild}
A="--seed 30 --from run29=docs/results/run29_2026-12-05/head --record $R --data-from 30
   --target-format int4vnni/int8vnni"
steps=("$@")
[ $# -gt 0 ] || steps=(data train tau served)
for step in "${steps[@]}"; do
  case $step in
    data) bash tools/continue_head.sh --run 30_q $A data ;;
    train) bash tools/continue_head.sh --run 30_q $A --lm-head-basis 24 --skip-eval train ;;
    tau) bash tools/continue_head.sh --run 30_q $A --baseline-record docs/results/run30_2026-12-05 tau ;;
    served) for b in mt_bench humaneval; do
              .venv/bin/python tools/compare_heads.py decode $R/served_$b.json $b --prompts 0:20 \
                  --weight-format int4vnni/int8vnni+int8vnni run29=docs/results/run29_2026-12-05/head \
                  run30=docs/results/run30_2026-12-05/head run30_q=$W/run30_q/head 2>&1 | grep -a -v USDT | tr '\r' '\n' | grep -v '%|' || true
              .venv/bin/python tools/compare_heads.py summary $R/served_$b.json --baseline run29 > $R/served_${b}_summary.md
            done ;;
  esac
done
