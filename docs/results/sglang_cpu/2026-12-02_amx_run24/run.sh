#!/bin/bash
# Re-tune profiles/sglang/cpu.yaml with head run 24 (digest b7e79c0f9645) on an AMX Xeon (family 6, model 207),
# 2026-12-02: the stages and flags of ../2026-12-02_amx_run23lr/run.sh with this folder as RETUNE_DIR (its `ab`
# benches bench_shipped/cpu.yaml, here the run-23-lr profile, beside plain decoding).
# Run from the repository root: bash docs/results/sglang_cpu/2026-12-02_amx_run24/run.sh [all|profile|collect|tune|bench|ab]
cd "$(dirname "$0")/../../../.."
export RETUNE_DIR=docs/results/sglang_cpu/2026-12-02_amx_run24
exec bash docs/results/sglang_cpu/2026-12-02_amx_run23lr/run.sh "$@"
