#!/bin/bash
# CAST profiled, tuned and benchmarked through SGLang 0.5.23 on the CPU (the AMX Xeon,
# 2026-11-30): bash run.sh profile|collect|tune|bench   (record: README.md beside this file)
set -e
cd "$(dirname "$0")/../../../.."
D=docs/results/sglang_cpu/2026-11-30_amx
M=~/.cache/sglang_cast/models/SmolLM2-135M-Instruct
H=sglang_cast/assets/smollm2-135m-eagle
DB=~/.cache/sglang_cast/sglang-cpu.db
case "$1" in
profile)
  .venv-sglang/bin/python -m autotune profile --backend sglang --gpu cpu --model-path $M --draft-path $H \
    --batch-sizes 1,4 --ctx-bucket 256 --ctx-buckets 2 --max-n 16 --draft-max-n 16 \
    --n-points 1,2,4,8,16 --warmup 1 --repeats 3 --overhead-steps 3 --overhead-warmup 1 --db $DB ;;
collect)
  .venv/bin/python -m autotune collect --model-path $M --draft-path $H --device cpu --dtype float32 \
    --threads 2 --num-prompts 16 --max-new-tokens 64 --batch-size 1,4 --db $DB ;;
tune)
  .venv-sglang/bin/python -m autotune tune --backend sglang --gpu cpu --model-path $M --draft-path $H \
    --db $DB --buckets 1,4 --confirm-prompts 0 --trials 60 --max-tokens 16 \
    --output profiles/sglang/cpu.yaml ;;
bench)
  .venv-sglang/bin/python tools/bench_sglang_cpu.py --rounds 2 --concurrency 1 4 --datasets mt_bench \
    --configs plain eagle3 adaptive cast --cast-profile profiles/sglang/cpu.yaml --out $D/bench ;;
*) echo "usage: run.sh profile|collect|tune|bench"; exit 2 ;;
esac
