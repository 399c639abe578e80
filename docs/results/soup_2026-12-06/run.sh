#!/usr/bin/env bash
# Soup A/B (2026-12-06): the weight average of runs 33 and 34 (both continue run 32's head, on seeds 33 and 34)
# judged against run 32 on the shipping bar (fp32 target, all 80 first turns) and as cpu-avx512.yaml serves it
# (first 20). Run 34's records are the base: their rows (run 32 and earlier, run 34) are copied, run 33's rows
# merged in from its record, so only the soup decodes. From the repository root, after run 34's tau and served:
#   bash docs/results/soup_2026-12-06/run.sh [soup tau served eval]   (no stage: the first three; ~25 + ~3 min alone)
# eval: train_draft's eval stage on the soup (chain α and tree τ, first 20 first turns; ~9 min), into
# docs/results/draft_head_report_soup33_34.json, as the run heads' reports carry it.
set -euo pipefail
D=docs/results/soup_2026-12-06
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
SOUP=$W/soup33_34/head
stages=("$@")
[ $# -gt 0 ] || stages=(soup tau served)
judge() {  # judge BENCHMARK FILE PROMPTS [compare_heads flag...]
  local b=$1 file=$2 prompts=$3; shift 3
  if [ ! -f $D/$file.json ]; then
    $PY - docs/results/run34_2026-12-06/$file.json docs/results/run33_2026-12-06/$file.json $D/$file.json <<'PY'
import json, sys
base, extra = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
base["heads"]["run33"] = extra["heads"]["run33"]
for prompt, rows in extra["prompts"].items():
    if "run33" in rows and prompt in base["prompts"]:
        base["prompts"][prompt]["run33"] = rows["run33"]
json.dump(base, open(sys.argv[3], "w"))
PY
  fi
  $PY tools/compare_heads.py decode $D/$file.json $b --prompts $prompts "$@" run32=docs/results/run32_2026-12-06/head \
      soup33_34=$SOUP 2>&1 | grep -a -v USDT | tr '\r' '\n' | grep -a -v '%|\|^\s*$' | tee -a $D/$file.log || true
  $PY tools/compare_heads.py summary $D/$file.json --baseline run32 > $D/${file}_summary.md
}
for stage in "${stages[@]}"; do
  case $stage in
    soup) $PY tools/average_heads.py --output $SOUP docs/results/run33_2026-12-06/head docs/results/run34_2026-12-06/head ;;
    tau) for b in humaneval mt_bench; do judge $b $b 0:80; done ;;
    served) for b in humaneval mt_bench; do judge $b served_$b 0:20 --weight-format int4vnni/int8vnni+int8vnni; done ;;
    eval) mkdir -p $W/soup33_34/eval
          $PY - $D/head $W/soup33_34/eval docs/results/draft_head_report_soup33_34.json <<'PY'
import json, sys, time
from dataclasses import asdict
from pathlib import Path
from sglang_cast.training.config import EvalConfig, PipelineConfig
from sglang_cast.training.evaluate import build_eval
from sglang_cast.training.target import Target
head, out, report = map(Path, sys.argv[1:])
cfg = PipelineConfig(benchmark_dir=Path("datasets"), eval=EvalConfig(prompts=20))  # train_draft --eval-prompts 20
start = time.time()
summary = build_eval(Target.embedded(), cfg, head, out)
report.write_text(json.dumps({"eval": {"head": str(head), "settings": asdict(cfg.eval),
                                       "seconds": time.time() - start, "summary": summary}}, indent=1) + "\n")
print(json.dumps(summary, indent=1))
PY
          ;;
    *) echo "run.sh: unknown stage '$stage' (soup, tau, served, eval)" >&2; exit 2 ;;
  esac
done
