#!/bin/bash
# Re-tune profiles/cpu.yaml with head run 25 (docs/results/2026-12-02_run25_amx.md) on an AMX Xeon (family 6, model 207),
# 2026-12-02, to ship the two together. The profile it replaces was tuned the same day on the same machine with head
# run 24 (kept here as cpu_shipped_run24.yaml): the same stages and flags (retune_amx_run23lr_2026-12-02/run.sh, with
# this folder as RETUNE_DIR). A new head is a new draft id, so its tables are timed again; for the same reason the
# two profiles cannot share an A/B run (`ab` would serve the run-24 profile beside a head it was not tuned with).
# Run from the repository root: bash docs/results/retune_amx_run25_2026-12-02/run.sh [all|collect|profile|tune|bench|b32]
cd "$(dirname "$0")/../../.."
export RETUNE_DIR=docs/results/retune_amx_run25_2026-12-02
exec bash docs/results/retune_amx_run23lr_2026-12-02/run.sh "$@"
