#!/bin/bash
# profiles/sglang/cpu.yaml re-tuned with head run 24 a second time (AMX Xeon, family 6, model 207, 2026-12-02):
# every SGLang forward and whole step in ../2026-12-02_amx_run24/'s sglang-cpu.db timed again (--max-age) with 5 timed
# rounds a point instead of 3, on the same traces; the same tune with its live gate; then mt_bench through
# bench_serving with the shipped profile (run 23-lr's, copied to shipped.yaml) served in the same rounds (--cast-ab).
# Run from the repository root: bash docs/results/sglang_cpu/2026-12-02_amx_run24_reprofile/run.sh [all|profile|tune|bench]
set -o pipefail
cd "$(dirname "$0")/../../../.."
source docs/results/sglang_cpu/log_filter.sh  # quiet
export RETUNE_DIR=docs/results/sglang_cpu/2026-12-02_amx_run24_reprofile
D=$RETUNE_DIR
M=~/.cache/sglang_cast/models/SmolLM2-135M-Instruct
H=sglang_cast/assets/smollm2-135m-eagle
DB=~/.cache/sglang_cast/sglang-cpu.db
step=${1:-all}
if [ $step = profile ] || [ $step = all ]; then  # points timed over an hour ago again: a rerun within the hour resumes
  date; .venv-sglang/bin/python -m autotune profile --backend sglang --gpu cpu --model-path $M --draft-path $H \
    --batch-sizes 1,4 --ctx-bucket 256 --ctx-buckets 2 --max-n 16 --draft-max-n 16 --n-points 1,2,4,8,16 \
    --warmup 1 --repeats 5 --overhead-steps 5 --overhead-warmup 1 --max-age 3600 --db $DB 2>&1 | quiet | tee $D/profile.log
  date
fi
if [ $step = tune ] || [ $step = all ]; then date; bash docs/results/sglang_cpu/2026-12-01_gate_amx/run.sh tune; date; fi
if [ $step = bench ] || [ $step = all ]; then
  [ -f $D/shipped.yaml ] || cp profiles/sglang/cpu.yaml $D/shipped.yaml
  mkdir -p $D/bench; date
  .venv-sglang/bin/python tools/bench_sglang_cpu.py --rounds 4 --concurrency 1 4 --datasets mt_bench \
    --configs plain cast --cast-profile $D/cpu.yaml --cast-ab shipped=$D/shipped.yaml --out $D/bench 2>&1 \
    | quiet | grep -a "^round" | tee $D/bench/rounds.log
  date
fi
