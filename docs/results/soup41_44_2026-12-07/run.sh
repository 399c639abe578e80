#!/usr/bin/env bash
# Soup A/B (2026-12-07): the weight average of runs 41, 42, 43 and 44 (halfway between the shipped soup of 41 and 42
# and the soup of 43 and 44, which 43 and 44 continue) judged against both on the shipping bar (fp32 target, all 80
# first turns), by continue_head.sh's own stages (`--soup`). The soup of 43 and 44's record is the base: its rows are
# copied, so only this soup decodes. From the repository root, with $W/run41 … run44/head present:
#   bash docs/results/soup41_44_2026-12-07/run.sh [soup tau served eval]   (no stage: soup tau)
# Every stage resumes: compare_heads keeps each decoded prompt.
set -euo pipefail
[ $# -gt 0 ] || set -- soup tau
exec bash tools/continue_head.sh --soup 41,42,43,44 --from soup41_42=docs/results/soup41_42_2026-12-07/head \
    --record docs/results/soup41_44_2026-12-07 --baseline-record docs/results/soup43_44_2026-12-07 \
    --served-format int4vnni/int8vnni+int8vnni "$@"
