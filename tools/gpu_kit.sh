#!/usr/bin/env bash
# The GPU kit: the CUDA tests, tools/bench.py on CUDA and cast-autotune profile/collect/tune in one command on a
# lent GPU machine, every result packed into $OUT/gpu_kit.tar.gz (JSON records, the tuned profile, one log per step,
# kit.json saying which step ran, how long, with which exit status; the autotune DB in gpu_kit_db.tar.gz).
# docs/native_gpu.md is the how-to.
#
#   here, once:     bash ../shared/gpu/prepare.sh && bash tools/gpu_kit.sh prepare
#                   (prepare adds the pytest wheels the device lacks to .gpu/p3/whl, which on_device.sh installs)
#   on the device:  call 1 carry [".gpu/p1"]: mkdir -p /tmp/g && cp .gpu/p1/* /tmp/g/
#                   call 2 carry [".gpu/p2"]: cp .gpu/p2/* /tmp/g/
#                   call 3 carry [".gpu/p3"]: source .gpu/p3/on_device.sh && bash tools/gpu_kit.sh run
# `train` in place of `run` trains the draft head online instead (#48; TRAIN_S, EVAL_PROMPTS, LM_HEAD_BASIS below); carry
# [".gpu/p3", ".gpu/online"] with an earlier call's unpacked online.tar to resume it.
#
# One device call may run 600 s: each step has its own cap (seconds, environment), so a step that runs out is
# recorded as timed out (exit 124) and the next one still runs. STEPS picks steps and their order, e.g. a fourth call
#   source .gpu/p3/on_device.sh && STEPS=autotune,bench-cast bash tools/gpu_kit.sh run
# Sizes are environment variables too; the caps' sum (580 s) fits one call (docs/native_gpu.md). A fourth call
# right after the third (the machine keeps /tmp only while warm) measures #34's goals on the profile it tuned:
#   source .gpu/p3/on_device.sh && NEW_TOKENS=128 BENCH_S=150 STEPS=bench-cast,bench-batches bash tools/gpu_kit.sh run
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
DTYPE=${DTYPE:-bfloat16}
STEPS=${STEPS:-bench,autotune,bench-cast,breakdown,bench-eager,tests}  # run in this order
TESTS=${TESTS:-tests/models/test_models.py tests/engine/test_cuda_graphs.py tests/autotune/test_graphed_profile.py tests/engine/test_device_paths.py tests/models/test_near_tie.py tests/tools/test_bench_device.py}
TESTS_S=${TESTS_S:-60}
BENCH_S=${BENCH_S:-130}
EAGER_S=${EAGER_S:-30}
AUTOTUNE_S=${AUTOTUNE_S:-190}
BREAKDOWN_S=${BREAKDOWN_S:-40}
PROMPTS=${PROMPTS:-16}
NEW_TOKENS=${NEW_TOKENS:-64}  # #34 states its goals at 128: NEW_TOKENS=128 STEPS=bench-cast in a call of its own
BATCHES=${BATCHES:-1,16}
TUNE_BUCKETS=${TUNE_BUCKETS:-1,4,16}  # traces, trials and the live gate per bucket (B 2-4 had none: they took 16's)
ROUNDS=${ROUNDS:-3}
EAGER_PROMPTS=${EAGER_PROMPTS:-4}  # eager decoding runs ~10x slower: a smaller workload, batch 1
EAGER_TOKENS=${EAGER_TOKENS:-32}
SWEEP_S=${SWEEP_S:-120}
SWEEP_BATCHES=${SWEEP_BATCHES:-4,8,32,64}  # #34: CAST never below 0.98x plain at B <= 64
SWEEP_PROMPTS=${SWEEP_PROMPTS:-64}
SWEEP_TOKENS=${SWEEP_TOKENS:-32}
OUT_DIR=${OUT:-/tmp/gpu_kit_out}  # what comes back from the device: gpu_kit.tar.gz (+ gpu_kit_db.tar.gz)
KIT=/tmp/gpu_kit  # the kit's files, packed into OUT_DIR after every step

prepare() {
  [[ -d .gpu/p3/whl ]] || { echo "error: no .gpu/p3/whl: run bash ../shared/gpu/prepare.sh first" >&2; exit 2; }
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/p3/whl pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.3 pygments==2.21.0
  git rev-parse HEAD > .gpu/p3/commit  # the device's copy of the checkout has no .git
  du -sh .gpu/p3
}

step() {  # step NAME SECONDS COMMAND...: run it under a cap, log to $KIT/NAME.log, note rc and seconds
  local name=$1 cap=$2; shift 2
  echo "== $name (cap ${cap}s): $*"
  local began=$SECONDS
  timeout "$cap" "$@" > "$KIT/$name.log" 2>&1
  local rc=$?
  local command="$*"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - began))" "${command//$'\n'/ }" >> "$KIT/steps.tsv"
  tail -n 5 "$KIT/$name.log"
  pack
}

pack() {  # a device call returns at most 8 files: everything travels as two archives, refreshed after each step
  tar -czf "$OUT_DIR/gpu_kit.tar.gz" -C "$KIT" --exclude=autotune.db .
  [[ -f $KIT/autotune.db ]] && tar -czf "$OUT_DIR/gpu_kit_db.tar.gz" -C "$KIT" autotune.db
  return 0
}

KNOWN_STEPS=(tests bench bench-eager autotune bench-cast bench-batches breakdown)

run() {
  IFS=, read -ra names <<< "$STEPS"
  for name in "${names[@]}"; do  # every name checked before the first step runs
    if [[ " ${KNOWN_STEPS[*]} " != *" $name "* ]]; then
      echo "error: unknown step '$name' in STEPS (accepted: ${KNOWN_STEPS[*]})" >&2; exit 2
    fi
  done
  mkdir -p "$KIT" "$OUT_DIR" && : > "$KIT/steps.tsv"
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: no CUDA device here; the kit runs on a lent GPU machine (docs/native_gpu.md)" >&2; exit 2
  fi
  local label profile name
  label=$("$PY" -c "from sglang_cast.server.launch_args import hardware_label; print(hardware_label('cuda'))")
  profile=profiles/$label.yaml; [[ -f $profile ]] || profile=profiles/h100.yaml
  # A profile an earlier call's autotune step tuned on this (still warm) machine.
  [[ -f $KIT/profile.yaml ]] && profile=$KIT/profile.yaml
  local common=(--dataset datasets/mt_bench.jsonl --device cuda --dtype "$DTYPE" --batch-size "$BATCHES"
                --num-prompts "$PROMPTS" --max-new-tokens "$NEW_TOKENS" --rounds "$ROUNDS")
  local tune=(--device cuda --dtype "$DTYPE" --db "$KIT/autotune.db" --quiet)
  local buckets=$TUNE_BUCKETS
  for name in "${names[@]}"; do
    case $name in
      tests)
        if "$PY" -c "import pytest" 2>/dev/null; then
          # shellcheck disable=SC2086  # TESTS is a list of paths
          step tests "$TESTS_S" "$PY" -m pytest -q -p no:cacheprovider $TESTS --junitxml "$KIT/tests.xml"
        else
          printf 'tests\tskipped: pytest is not on the device (bash tools/gpu_kit.sh prepare carries it)\t0\t-\n' \
            >> "$KIT/steps.tsv"
        fi ;;
      bench)
        step bench "$BENCH_S" "$PY" tools/bench.py --methods vanilla,eagle2 --profile "$profile" "${common[@]}" \
          --json "$KIT/bench.json" --markdown "$KIT/bench.md" ;;
      bench-eager)  # plain decoding with every forward eager: what the CUDA graphs buy (engine/cuda_graphs.py)
        step bench-eager "$EAGER_S" "$PY" tools/bench.py --methods vanilla --profile "$profile" \
          --dataset datasets/mt_bench.jsonl --device cuda --dtype "$DTYPE" --batch-size 1 --rounds "$ROUNDS" \
          --num-prompts "$EAGER_PROMPTS" --max-new-tokens "$EAGER_TOKENS" --disable-cuda-graph \
          --json "$KIT/bench_eager.json" --markdown "$KIT/bench_eager.md" ;;
      autotune)  # forwards timed as graph replays; traces and the step design on autotune/prompts.txt
        step autotune "$AUTOTUNE_S" bash -c "set -e
          $PY -m autotune profile --gpu $label ${tune[*]} --batch-sizes $buckets --ctx-bucket 512 \
            --ctx-buckets 1 --max-n 64 --n-points 1,2,4,8,16,32,64 --draft-max-n 16 --warmup 1 --repeats 3
          $PY -m autotune collect ${tune[*]} --num-prompts 16 --max-new-tokens 64 --batch-size $buckets
          $PY -m autotune tune --gpu $label ${tune[*]} --buckets $buckets --trials 30 --confirm-prompts 16 \
            --confirm-max-new-tokens 32 --live-rounds 2 --output $KIT/profile.yaml"
        [[ -f $KIT/profile.yaml ]] && profile=$KIT/profile.yaml ;;
      bench-cast)  # on the profile autotune just tuned (else profiles/<label>.yaml)
        step bench-cast "$BENCH_S" "$PY" tools/bench.py --methods vanilla,cast,goodput --profile "$profile" \
          "${common[@]}" --json "$KIT/bench_cast.json" --markdown "$KIT/bench_cast.md" ;;
      bench-batches)  # the other batch sizes of #34's "never below 0.98x at B <= 64", on the tuned profile
        step bench-batches "$SWEEP_S" "$PY" tools/bench.py --methods vanilla,cast --profile "$profile" \
          --dataset datasets/mt_bench.jsonl --device cuda --dtype "$DTYPE" --batch-size "$SWEEP_BATCHES" \
          --num-prompts "$SWEEP_PROMPTS" --max-new-tokens "$SWEEP_TOKENS" --rounds "$ROUNDS" \
          --json "$KIT/bench_batches.json" --markdown "$KIT/bench_batches.md" ;;
      breakdown)  # where a B = 1 iteration's time goes (torch.profiler), CAST then plain decoding
        step breakdown "$BREAKDOWN_S" bash -c "set -e
          $PY tools/step_profile.py --device cuda --dtype $DTYPE --policy cast --profile $profile \
            --num-prompts 1 --max-new-tokens 32 --json $KIT/breakdown_cast.json
          $PY tools/step_profile.py --device cuda --dtype $DTYPE --policy vanilla --profile $profile \
            --num-prompts 1 --max-new-tokens 32 --json $KIT/breakdown_vanilla.json" ;;
    esac
  done
  record "$label" "$profile"
  pack
}

record() {  # kit.json: the machine, the commit, and every step's exit status, seconds and outputs
  "$PY" - "$KIT" "$1" "$2" <<'PYEOF'
import json, pathlib, sys, torch
kit, label, profile = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
steps = []
for line in (kit / "steps.tsv").read_text().splitlines():
    name, rc, seconds, command = line.split("\t")
    steps.append({"step": name, "exit": int(rc) if rc.lstrip("-").isdigit() else rc, "seconds": int(seconds),
                  "command": command, "timed_out": rc == "124", "log": f"{name}.log"})
saved = pathlib.Path(".gpu/p3/commit")
commit = saved.read_text().strip() if saved.is_file() else None
record = {"device": torch.cuda.get_device_name(0), "label": label, "torch": torch.__version__,
          "cuda": torch.version.cuda, "commit": commit, "bench_profile": profile, "steps": steps,
          "outputs": sorted(p.name for p in kit.iterdir())}
(kit / "kit.json").write_text(json.dumps(record, indent=2))
print(json.dumps(record["steps"], indent=1))
PYEOF
}

train() {  # #48: the draft head trained online (sglang_cast/training/online.py), resumed from .gpu/online if carried
  local run=/tmp/online_head
  mkdir -p "$OUT_DIR" && rm -rf "$run"
  if [[ -f .gpu/online/state.json ]]; then cp -r .gpu/online "$run"; echo "resuming $(cat .gpu/online/state.json | head -c 80)"; fi
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: no CUDA device here; train runs on a lent GPU machine (docs/draft_head.md)" >&2; exit 2
  fi
  TQDM_DISABLE=1 PYTHONUNBUFFERED=1 timeout "$TRAIN_CAP_S" "$PY" -m sglang_cast.training.online --out "$run" \
    --budget-s "$TRAIN_S" --eval-prompts "$EVAL_PROMPTS" --lm-head-basis "$LM_HEAD_BASIS" 2>&1 | tee "$OUT_DIR/online.log"
  # What comes back is at most 8 files of 16 MiB: the fp16 head (~20 MB) travels in 15 MB pieces;
  # bring it home with  cat online.tar.part-* | tar -x -C DIR
  tar -cf - -C "$run" . | split -b 15m - "$OUT_DIR/online.tar.part-"
  cp "$run/summary.json" "$run/log.jsonl" "$OUT_DIR/" 2>/dev/null
  ls -la "$OUT_DIR"
}

TRAIN_S=${TRAIN_S:-280}  # train: seconds of generation and training (--budget-s)
TRAIN_CAP_S=${TRAIN_CAP_S:-480}  # train: the whole command's cap, evaluation included
EVAL_PROMPTS=${EVAL_PROMPTS:-40}  # train: τ of the shipped and the trained head on this many first turns each
LM_HEAD_BASIS=${LM_HEAD_BASIS:-24}  # train: --lm-head-basis (run 29's CPU A/B: 24 beat off; 0: off)

case ${1:-} in
  prepare) prepare ;;
  run) run ;;
  train) train ;;
  *) echo "usage: bash tools/gpu_kit.sh prepare|run|train (see the header)" >&2; exit 2 ;;
esac
