#!/usr/bin/env bash
# A B = 1 step's host work, stage by stage, on the AMD EPYC family 26 model 2 with the shipped cpu-avx512.yaml and
# head (2026-12-07): the 2026-12-05 record's stages.py (3 decodes of 8 humaneval prompts x 32 tokens, CAST then plain
# decoding), from the repository root on a quiet CPU (~3 min).
set -euo pipefail
PY=.venv/bin/python
D=docs/results/host_work_2026-12-05
$PY $D/stages.py cast 3 && $PY $D/stages.py vanilla 3
