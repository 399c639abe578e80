cd "$(dirname "$0")/../../.."
# (a training run was paused with SIGSTOP around this script)
# SGLANG_CAST_CACHE: any cache holding the converted model
i=0
for fmt in int8 int8:dense32 int8:dense32 int8; do
  i=$((i+1))
  .venv/bin/python tools/bench.py --methods vanilla,cast --dataset datasets/mt_bench.jsonl --batch-size 8 \
      --num-prompts 16 --max-new-tokens 32 --rounds 3 --threads 2 --profile profiles/cpu-avx2.yaml \
      --weight-format $fmt --json docs/results/dense_from_2026-11-28/e2e_$i.json 
done
