#!/usr/bin/env bash
# #48 item 3: does a continued run gain more at half the peak learning rate? Run 23 (run 22 continued on seed 22's
# data at lr 5e-4, the recipe since run 11) measured level with run 22; this arm (run 23_lr) trains from the same
# head on the same data (run 23's prompts, answers and vocabulary, hard-linked) at lr 2.5e-4, nothing else changed,
# and its eval stage (first 20 first turns of each benchmark, EAGLE-2's tree, full pool) is read against run 23's
# and run 22's (run 22's head from its work dir: the assets hold this arm's since it shipped); `tau` decodes all 80
# first turns next to run 22's and run 23's rows. Resumable; from the repository root:
#   bash docs/results/lr_ab_2026-12-01/run.sh [train|tau]...   (default: train, which links the data first)
set -euo pipefail
W=${W:-$HOME/.cache/sglang_cast/rebuild}
exec bash tools/continue_head.sh --run 23_lr --seed 22 --from run22=$W/run22/head --data-from 23 --lr 2.5e-4 \
    --record docs/results/lr_ab_2026-12-01 --baseline-record docs/results/run23_2026-12-01 ${@:-train}
