#!/usr/bin/env bash
# Re-tune a shipped CPU profile for a new draft head (or new kernels) and judge it against the profile it replaces
# (#48 item 6). Stages, each writing its log into the record folder:
#   collect  fp32 traces of the head the engine loads now (the tuner replays only traces of the head it ships with)
#   profile  forward and host-overhead tables for every --formats entry (keyed by the head's digest)
#   tune     the joint tune over those formats, with the replaced profile's trees among each study's first trials
#            (`tune --incumbent`: kept unless a pick replays 3 % above them), published to RECORD/<the replaced
#            profile's file name>
#   ab       the new profile against the replaced one, both with the loaded head, beside plain decoding, in the same
#            interleaved rounds (tools/bench.py --against-profile), mt_bench and humaneval
#   bench    the new profile against plain decoding over --bench-batches
# Copying the new profile into profiles/ is left to you, after reading ab and bench.
#
# Usage (repository root):
#   bash tools/retune_profile.sh --record DIR --profile OLD --formats F[,F...] [--trials N] [--threads T]
#                                [--batches B] [--b1-prompts N] [--max-traces N] [--ab-batches B]
#                                [--bench-batches B] [STAGE...]
#     --record DIR         where the logs, the new profile and the bench records go, e.g. docs/results/ship_run30_avx512_<date>
#     --profile OLD        the shipped profile it replaces, e.g. profiles/cpu-avx512.yaml
#     --formats F[,F...]   weight formats profiled and tuned jointly, e.g. int4vnni/int8vnni+int8vnni,int4vnni/int8vnni+int8
#     --trials N           Optuna trials per bucket (default 150)
#     --threads T          torch CPU threads (default: this machine's cores)
#     --batches B          profile and tune buckets, and the collected batch sizes (default 1,2,4,8,16,32)
#     --b1-prompts N       tuning prompts recorded at B = 1 (default 48; the other batch sizes below 32 use 16)
#     --max-traces N       iterations replayed per bucket, an evenly spaced sample (default 100000: all of them;
#                          a 40-iteration sample at B = 1 picked a tree that lost on the benchmarks, 2026-12-06)
#     --ab-batches B       batch sizes of the ab stage (default 1,2)
#     --bench-batches B    batch sizes of the bench stage (default 1,2,4,8,16)
#     STAGE                collect, profile, tune, ab, bench (default: all five, in that order)
# On a 2-core AVX-512 EPYC with one format: collect ~28 min, profile ~12, tune ~19, ab ~7, bench ~7 (family 25,
# 2026-12-06); collect 19, profile 6, tune 8, ab 3, bench 2 (family 26, 2026-12-07).
set -euo pipefail
usage() { awk '/^# Usage/ { on = 1 } /^# On a / { exit } on' "$0" | cut -c3-; }  # the Usage lines above
fail() { echo "retune_profile: $1" >&2; usage >&2; exit 2; }
RECORD= OLD= FORMATS= TRIALS=150 THREADS=$(nproc) BATCHES=1,2,4,8,16,32 B1_PROMPTS=48 MAX_TRACES=100000 AB_BATCHES=1,2
BENCH_BATCHES=1,2,4,8,16 STAGES=()
while [ $# -gt 0 ]; do
  case $1 in
    --record|--profile|--formats|--trials|--threads|--batches|--b1-prompts|--max-traces|--ab-batches|--bench-batches)
      [ $# -ge 2 ] || fail "$1 needs a value"
      case $1 in --record) RECORD=$2 ;; --profile) OLD=$2 ;; --formats) FORMATS=$2 ;; --trials) TRIALS=$2 ;;
                 --threads) THREADS=$2 ;; --batches) BATCHES=$2 ;; --b1-prompts) B1_PROMPTS=$2 ;;
                 --max-traces) MAX_TRACES=$2 ;; --ab-batches) AB_BATCHES=$2 ;; *) BENCH_BATCHES=$2 ;; esac
      shift 2 ;;
    collect|profile|tune|ab|bench) STAGES+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) fail "unknown argument '$1' (stages are collect, profile, tune, ab, bench)" ;;
  esac
done
[ -n "$RECORD" ] || fail "--record DIR is required"
[ -f "$OLD" ] || fail "--profile: '$OLD' is not a file (give the shipped profile it replaces)"
[ -n "$FORMATS" ] || fail "--formats is required (the weight formats to profile and tune)"
[[ $TRIALS =~ ^[1-9][0-9]*$ ]] || fail "--trials takes a whole number >= 1; got '$TRIALS'"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || fail "--threads takes a whole number >= 1; got '$THREADS'"
[[ $B1_PROMPTS =~ ^[1-9][0-9]*$ ]] || fail "--b1-prompts takes a whole number >= 1; got '$B1_PROMPTS'"
[[ $MAX_TRACES =~ ^[1-9][0-9]*$ ]] || fail "--max-traces takes a whole number >= 1; got '$MAX_TRACES'"
for list in "$BATCHES" "$AB_BATCHES" "$BENCH_BATCHES"; do
  [[ $list =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || fail "batch sizes are comma-separated whole numbers >= 1; got '$list'"
done
[ ${#STAGES[@]} -gt 0 ] || STAGES=(collect profile tune ab bench)

PY=.venv/bin/python
NEW=$RECORD/$(basename "$OLD")
DATASETS=(mt_bench humaneval)
bars() { tr '\r' '\n' | grep -a -v 'USDT\|it/s\]$\|s/it\]$\|run/s[],]\|s/run[],]\|^\s*$' || true; }  # progress bars dropped
stamp() { echo "== $1 $(date -u '+%F %T UTC')"; }
one=$(tr , '\n' <<< "$BATCHES" | awk '$1 == 1')                    # a call of its own, --b1-prompts x 48 tokens
small=$(tr , '\n' <<< "$BATCHES" | awk '$1 > 1 && $1 < 32' | paste -sd, -)  # one call, 16 prompts x 48 tokens
large=$(tr , '\n' <<< "$BATCHES" | awk '$1 >= 32')                # a call each, as many prompts as the batch, x 32
record() {  # one collect call: batch sizes, prompts, tokens per prompt
  $PY -m autotune collect --threads $THREADS --batch-size $1 --num-prompts $2 --max-new-tokens $3 --lookup-depth 8 \
      --quiet 2>&1
}
mkdir -p "$RECORD"
for stage in "${STAGES[@]}"; do
  case $stage in
    collect) { stamp collect
               [ -z "$one" ] || record 1 $B1_PROMPTS 48
               [ -z "$small" ] || record $small 16 48
               for b in $large; do record $b $b 32; done; } | bars | tee "$RECORD/collect.log" ;;
    profile) { stamp profile
               $PY -m autotune profile --gpu cpu --threads $THREADS --weight-format $FORMATS --batch-sizes $BATCHES \
                   --ctx-bucket 128 --ctx-buckets 4 --max-n 32 --draft-max-n 16 --repeats 7 --max-age 0 \
                   --overhead-steps 6 --overhead-warmup 2 --quiet 2>&1; } | bars | tee "$RECORD/profile.log" ;;
    tune) { stamp tune
            $PY -m autotune tune --gpu cpu --threads $THREADS --weight-format $FORMATS --buckets $BATCHES \
                --trials $TRIALS --max-traces $MAX_TRACES --top-k 8 --max-depth 6 --max-tokens 32 --max-lookup-depth 8 \
                --confirm-prompts 16 --confirm-sets 3 --confirm-max-new-tokens 32 --live-rounds 3 \
                --live-min-speedup 1.15 --incumbent "$OLD" --output "$NEW" 2>&1; } | bars | tee "$RECORD/tune.log" ;;
    ab|bench)
      [ -f "$NEW" ] || fail "$stage: no $NEW yet (run the tune stage first)"
      for ds in "${DATASETS[@]}"; do
        if [ $stage = ab ]; then
          flags=(--batch-size $AB_BATCHES --rounds 5 --against-profile "$OLD")
        else
          flags=(--batch-size $BENCH_BATCHES --rounds 3)
        fi
        { stamp "$stage $ds"
          $PY tools/bench.py --methods vanilla,cast --profile "$NEW" --dataset datasets/$ds.jsonl --num-prompts 16 \
              --max-new-tokens 32 --threads $THREADS "${flags[@]}" --json "$RECORD/${stage}_$ds.json" \
              --markdown "$RECORD/${stage}_$ds.md" 2>&1; } | bars | tee "$RECORD/${stage}_$ds.log"
      done ;;
  esac
done
