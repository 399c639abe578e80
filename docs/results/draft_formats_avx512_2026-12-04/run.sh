#!/usr/bin/env bash
# The shipped draft head per weight format and its LM head's share (docs/results/2026-12-04_draft_formats_avx512.md),
# three repeats of 60 round-robin rounds (~1 min). From the repository root:
#   bash docs/results/draft_formats_avx512_2026-12-04/run.sh          # the forwards
set -euo pipefail
D=docs/results/draft_formats_avx512_2026-12-04
[ "${1:-}" = tau ] || for i in 1 2 3; do
    .venv/bin/python $D/draft_formats.py 60 $D/draft_formats_repeat$i.json 2>&1 | grep -v USDT | tee $D/draft_formats_repeat$i.log
done
# tau with EAGLE-2's tree (a static tree, so it does not follow timings), int8 against int4 draft head (~16 min):
#   bash docs/results/draft_formats_avx512_2026-12-04/run.sh tau
if [ "${1:-}" = tau ]; then
    for ds in mt_bench humaneval; do
        for draft in int8 int4; do
            .venv/bin/python tools/bench.py --methods vanilla,eagle2 --dataset datasets/$ds.jsonl --batch-size 1 \
                --num-prompts 16 --max-new-tokens 32 --rounds 3 --threads 2 --weight-format int4/int8+$draft \
                --json $D/tau_eagle2_${ds}_$draft.json --markdown $D/tau_eagle2_${ds}_$draft.md 2>&1 | grep -v USDT
        done
    done
fi
