#!/usr/bin/env bash
# Continue a draft head by one training run and judge it against the head it started from (#48 item 4).
# A run is: the target's own answers to a fresh prompt mix drawn with the run's seed (`data`); training from
# the previous head with the shipped recipe, then the eval stage (`train`); τ prompt by prompt on all 80
# first turns of mt_bench and humaneval against the previous head (`tau`, tools/compare_heads.py); and where
# acceptance is lost on held-out data (`gap`, tools/draft_gap.py); and, given --served-format, τ on the first 20
# of each with the target and heads stored as a profile serves them (`served`: int4 targets accept less than
# fp32's, docs/results/2026-12-05_served_format_tau_avx512.md). Every stage is resumable (training checkpoints
# every 200 steps, decoding keeps every prompt): rerun the stage after an interruption. A finished head that is
# no run's is judged by the same stages with --head NAME=DIR, and --soup A,B first averages runs A and B into one
# (tools/average_heads.py: `soup`); either can be given train_draft's eval stage (`eval`).
#
# Usage (repository root):
#   bash tools/continue_head.sh --run N --seed S --from NAME=HEAD --record DIR [--baseline-record DIR] [--lr LR]
#                               [--data-from RUN] [--lm-head-basis S] [--target-format F] [--served-format F]
#                               [--replay RUN[,RUN...]] [--max-steps N] [--bf16-autocast] [--skip-eval] [STAGE...]
#   bash tools/continue_head.sh --head NAME=DIR --from NAME=HEAD --record DIR [--baseline-record DIR]
#                               [--served-format F] [tau|gap|served|eval...]
#   bash tools/continue_head.sh --soup A,B --from NAME=HEAD --record DIR [--baseline-record DIR]
#                               [--served-format F] [soup|tau|gap|served|eval...]
#     --run N                the run's number, or a label for an A/B arm (23_lr): work dir $W/runN (W defaults to
#                            ~/.cache/sglang_cast/rebuild), head $W/runN/head, report docs/results/draft_head_report_runN.json
#     --seed S               the next unused seed (docs/draft_head.md names it)
#     --from NAME=HEAD       the head it continues, e.g. run23_lr=sglang_cast/assets/smollm2-135m-eagle
#     --record DIR           where its logs and per-prompt results go, e.g. docs/results/run24_2026-12-02
#     --baseline-record DIR  the previous run's record: its per-prompt rows are reused, so only run N's are decoded
#     --head NAME=DIR        judge this finished head (e.g. soup39_40=~/.cache/sglang_cast/rebuild/soup39_40/head)
#                            instead of run N's: tau, gap, served and eval only; --run and --seed are then not needed
#     --soup A,B             judge the weight average of runs A and B ($W/runA/head, $W/runB/head; two or more runs),
#                            named soupA_B and written to $W/soupA_B/head by the soup stage; stages as --head's, plus
#                            soup (default: soup tau, then served if --served-format is given)
#     --lr LR                peak learning rate (default 2.5e-4, since run 23-lr; runs 11-23 used 5e-4)
#     --data-from RUN        an A/B arm: `data` hard-links run RUN's prompts and answers (and its vocabulary, if
#                            built) instead of drawing new ones; give RUN's --seed (train_draft refuses stages
#                            built with another)
#     --lm-head-basis S      train the LM head as W + B.P over the target's output rows at scale S (train_draft's
#                            flag; default 24, since run 29; 0: off, the recipe of runs 24-28; docs/draft_head.md)
#     --target-format F      the target answers the run's prompts with its linears stored in F, e.g.
#                            int4vnni/int8vnni (a served format's own answers and features; train_draft's flag;
#                            default fp32); give it to data and train alike; with --data-from the arm shares
#                            RUN's prompts only and answers them itself
#     --served-format F      the weight format the served stage judges in: a profile's `weight_format`, e.g.
#                            int4vnni/int8vnni+int8vnni (profiles/cpu-avx512.yaml); adds `served` to the default
#                            stages; with --baseline-record its served_*.json rows (same format) are reused
#     --replay RUN[,RUN...]  train on those earlier runs' answers too, beside this run's ($W/runRUN/responses:
#                            train_draft's --replay-responses); the epochs then cover them all
#     --max-steps N          stop training after N optimiser steps (default: the epochs decide), e.g. a replay
#                            arm held to the compute of the run it is compared with
#     --bf16-autocast        train with the head's matmuls in bf16 (train_draft's flag: AVX512-BF16 or AMX; the train
#                            stage in 0.73x the fp32 time on the AVX-512 EPYC; docs/results/2026-12-07_bf16_training_avx512.md)
#     --skip-eval            the train stage stops at the exported head, without train_draft's eval stage (20
#                            prompts a benchmark, ~9 min; the tau stage decodes all 80)
#     STAGE                  data, train, tau, gap, served (default: data train tau gap, then served if
#                            --served-format is given); with --head or --soup also eval (chain α and tree τ on the
#                            first 20 first turns, tools/compare_heads.py eval, into docs/results/draft_head_report_NAME.json)
# On a 2-core family-25 AVX-512 EPYC: data ~30 min (~10 with --target-format int4vnni/int8vnni), train ~32 (~23 with
# --bf16-autocast) + eval ~9, tau ~2 x 9, gap ~9, served ~2 x 3; on a family-26 one with both flags data ~6, train
# ~15 (runs 37, 38).
set -euo pipefail
usage() { awk '/^# Usage/ { on = 1 } /^# On a / { exit } on' "$0" | cut -c3-; }  # the Usage lines above
fail() { echo "continue_head: $1" >&2; usage >&2; exit 2; }
is_head() { [ -f "$1/config.json" ]; }  # a draft head folder, as train_draft and average_heads write one
check_head() {  # check_head FLAG NAME=DIR: the flag names a draft head folder
  [[ $2 == ?*=?* ]] || fail "$1 takes NAME=DIR; got '$2'"
  is_head "${2#*=}" || fail "$1: ${2#*=} is not a draft head folder (no config.json)"
}
RUN= SEED= HEAD= SOUP= FROM= RECORD= BASELINE_RECORD= LR=2.5e-4 DATA_FROM= BASIS=24 TARGET_FORMAT=fp32 SERVED_FORMAT=
REPLAY= MAX_STEPS= UNTIL= BF16= STAGES=()
while [ $# -gt 0 ]; do
  case $1 in
    --run|--seed|--head|--soup|--from|--record|--baseline-record|--lr|--data-from|--lm-head-basis|--target-format|--served-format|\
    --replay|--max-steps)
      [ $# -ge 2 ] || fail "$1 needs a value"
      case $1 in --run) RUN=$2 ;; --seed) SEED=$2 ;; --head) HEAD=$2 ;; --soup) SOUP=$2 ;; --from) FROM=$2 ;; --record) RECORD=$2 ;; --lr) LR=$2 ;;
                 --data-from) DATA_FROM=$2 ;; --lm-head-basis) BASIS=$2 ;; --target-format) TARGET_FORMAT=$2 ;;
                 --served-format) SERVED_FORMAT=$2 ;; --replay) REPLAY=$2 ;; --max-steps) MAX_STEPS=$2 ;;
                 *) BASELINE_RECORD=$2 ;; esac
      shift 2 ;;
    --skip-eval) UNTIL="--until train"; shift ;;
    --bf16-autocast) BF16=" --bf16-autocast"; shift ;;
    data|train|tau|gap|served|soup|eval) STAGES+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) fail "unknown argument '$1' (stages are data, train, tau, gap, served, soup, eval)" ;;
  esac
done
RUN_ID='[0-9]+(_[a-z0-9]+)?'  # a run's number, or one with an A/B arm's label
W=${W:-$HOME/.cache/sglang_cast/rebuild}
has_stage() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }
if [ -n "$SOUP" ]; then  # the average of finished runs: made by the soup stage, then judged as --head's
  [ -z "$HEAD" ] || fail "--soup and --head both name the head to judge: give one"
  [[ $SOUP =~ ^$RUN_ID(,$RUN_ID)+$ ]] || fail "--soup takes two or more run numbers, comma-separated (41,42); got '$SOUP'"
  HEAD=soup${SOUP//,/_}=$W/soup${SOUP//,/_}/head
  [ ${#STAGES[@]} -gt 0 ] || STAGES=(soup tau ${SERVED_FORMAT:+served})
elif [ -n "$HEAD" ]; then
  check_head --head "$HEAD"
  ! has_stage soup || fail "the soup stage needs --soup A,B (the runs to average)"
fi
if [ -n "$HEAD" ]; then  # a finished head: judged, never trained
  [ ${#STAGES[@]} -gt 0 ] && ! has_stage data && ! has_stage train ||
      fail "--head and --soup judge a finished head: give its stages (soup, tau, gap, served, eval), not data or train"
else
  [[ $RUN =~ ^$RUN_ID$ ]] || fail "--run takes a whole number, or one with a label (23_lr); got '$RUN'"
  [[ $SEED =~ ^[0-9]+$ ]] || fail "--seed takes a whole number; got '$SEED'"
  ! has_stage soup && ! has_stage eval ||
      fail "soup and eval judge a finished head (--soup, --head); a run's eval is its train stage's (without --skip-eval)"
  [ ${#STAGES[@]} -gt 0 ] || STAGES=(data train tau gap ${SERVED_FORMAT:+served})
fi
[[ $BASIS =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "--lm-head-basis takes a number >= 0 (0: off); got '$BASIS'"
[[ -z $REPLAY || $REPLAY =~ ^$RUN_ID(,$RUN_ID)*$ ]] || fail "--replay takes run numbers, comma-separated (29,30); got '$REPLAY'"
[[ -z $MAX_STEPS || $MAX_STEPS =~ ^[1-9][0-9]*$ ]] || fail "--max-steps takes a whole number >= 1; got '$MAX_STEPS'"
[[ $FROM == ?*=?* && -n $RECORD ]] || fail "--from NAME=HEAD and --record DIR are required"
check_head --from "$FROM"
PREVIOUS=${FROM#*=}
! has_stage served || [ -n "$SERVED_FORMAT" ] || fail "the served stage needs --served-format F"

PY=.venv/bin/python
WORK=$W/run$RUN
HEAD=${HEAD:-run$RUN=$WORK/head}  # NAME=DIR: the head the judging stages decode
DATA=(self_instruct prompts responses)  # what the data stage writes into the work dir (train builds vocab)
LINKED=("${DATA[@]}" vocab)  # what an arm shares with its --data-from run
# An arm in another target format shares the prompts and answers them itself.
[ "$TARGET_FORMAT" = fp32 ] || { DATA=(self_instruct prompts); LINKED=("${DATA[@]}"); }
COMMON="--benchmark-dir datasets --response-tokens 192 --max-answers 0 --eval-prompts 20 --gen-batch 64"
COMMON+=" --target-format $TARGET_FORMAT"
MIX="--self-instruct 300 --doc-prompts 150 --template-prompts 550 --task-prompts 800"  # run 15's mix
RECIPE="--lr $LR --warmup-steps 20 --epochs 2 --soft-top-k 16 --soft-labels 0.5 --ttt-steps 7"  # docs/draft_head.md
[[ $BASIS =~ ^0+(\.0+)?$ ]] || RECIPE+=" --lm-head-basis $BASIS"
for earlier in ${REPLAY//,/ }; do
  [ -d "$W/run$earlier/responses" ] || fail "--replay: $W/run$earlier has no responses (run its data stage first)"
  RECIPE+=" --replay-responses $W/run$earlier/responses"
done
[ -z "$MAX_STEPS" ] || RECIPE+=" --max-steps $MAX_STEPS"
RECIPE+=$BF16
judge() {  # judge BENCHMARK FILE PROMPTS [compare_heads flag...]: the head against the previous one, then the table
  local b=$1 file=$2 prompts=$3; shift 3
  if [ -n "$BASELINE_RECORD" ] && [ -f "$BASELINE_RECORD/$file.json" ] && [ ! -f "$RECORD/$file.json" ]; then
    cp "$BASELINE_RECORD/$file.json" "$RECORD/$file.json"  # the previous head's rows: only the new head decodes
  fi
  $PY tools/compare_heads.py decode "$RECORD/$file.json" $b --prompts $prompts "$@" "$FROM" "$HEAD" \
      2>&1 | quiet | bars | tee -a "$RECORD/$file.log"
  $PY tools/compare_heads.py summary "$RECORD/$file.json" --baseline "${FROM%%=*}" > "$RECORD/${file}_summary.md"
}
judged() {  # the judging stages need the head: a run's train stage or a soup's soup stage makes it
  is_head "${HEAD#*=}" || fail "no head at ${HEAD#*=} yet: its train stage (a run) or soup stage (--soup) makes it"
}
quiet() { grep -a -v USDT || true; }
bars() { tr '\r' '\n' | grep -a -v '%|\|^\s*$' || true; }  # tqdm redraws its bars with \r: drop them from the logs
link_data() {  # hard links: the arm's stages are the source run's files, at no disk cost
  for data in "${DATA[@]}"; do
    [ -e "$W/run$DATA_FROM/$data" ] || fail "--data-from: $W/run$DATA_FROM has no $data (run its data stage first)"
  done
  mkdir -p "$WORK"
  for data in "${LINKED[@]}"; do
    [ -e "$WORK/$data" ] || [ ! -e "$W/run$DATA_FROM/$data" ] || cp -al "$W/run$DATA_FROM/$data" "$WORK/$data"
  done
}
mkdir -p "$RECORD"
for stage in "${STAGES[@]}"; do
  case $stage in
    data) [ -z "$DATA_FROM" ] || link_data
          if [ -z "$DATA_FROM" ] || [ "$TARGET_FORMAT" != fp32 ]; then
            $PY tools/train_draft.py $COMMON --until responses --work-dir $WORK --seed $SEED $MIX --soft-top-k 16 \
                2>&1 | quiet
          fi ;;
    train) [ -z "$DATA_FROM" ] || link_data  # never regenerate an arm's data
           $PY tools/train_draft.py $COMMON --work-dir $WORK --output $WORK/head --seed $SEED \
               --init-head "$PREVIOUS" $RECIPE $MIX $UNTIL 2>&1 | quiet | bars | tee -a "$RECORD/train.log"
           cp $WORK/report.json docs/results/draft_head_report_run$RUN.json ;;
    tau) judged; for b in humaneval mt_bench; do judge $b $b 0:80; done ;;
    gap) judged; $PY tools/draft_gap.py --head "${HEAD#*=}" --held-out $W/heldout --ttt-steps 7 --tau-prompts 20 \
             --json "$RECORD/gap_${HEAD%%=*}.json" 2>&1 | quiet | bars | tee "$RECORD/gap_${HEAD%%=*}.log" ;;
    served) judged; for b in humaneval mt_bench; do judge $b served_$b 0:20 --weight-format "$SERVED_FORMAT"; done ;;
    soup) runs=()
          for run in ${SOUP//,/ }; do
            is_head "$W/run$run/head" || fail "--soup: $W/run$run has no head (run its train stage first)"
            runs+=("$W/run$run/head")
          done
          $PY tools/average_heads.py --output "${HEAD#*=}" "${runs[@]}" ;;
    eval) judged; $PY tools/compare_heads.py eval "docs/results/draft_head_report_${HEAD%%=*}.json" "${HEAD#*=}" \
              2>&1 | quiet | bars ;;
  esac
done
