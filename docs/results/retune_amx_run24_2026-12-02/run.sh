#!/bin/bash
# Re-tune profiles/cpu.yaml with head run 24 (digest b7e79c0f9645) on an AMX Xeon (family 6, model 207), 2026-12-02.
# The profile it replaces was tuned the same day on the same machine with head run 23-lr (kept here as
# cpu_shipped_run23lr.yaml): the same stages and flags (retune_amx_run23lr_2026-12-02/run.sh, with this folder as
# RETUNE_DIR and that profile as the A/B's baseline). A new head is a new draft id, so its tables are timed again.
# Run from the repository root: bash docs/results/retune_amx_run24_2026-12-02/run.sh [all|collect|profile|tune|ab|bench|b32]
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=docs/results/retune_amx_run24_2026-12-02
export AB_BASELINE=$RETUNE_DIR/cpu_shipped_run23lr.yaml
exec bash docs/results/retune_amx_run23lr_2026-12-02/run.sh "$@"
