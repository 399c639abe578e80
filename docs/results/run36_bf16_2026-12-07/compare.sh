#!/usr/bin/env bash
# Run 36 (fp32 training) against its bf16-autocast arm: the held-out accuracy and loss at every unrolled step from
# the two train logs (the same data, seed and 2 % split), then τ on the first 20 first turns of each benchmark under
# both heads (fp32 target, EAGLE-2's tree, full pool; ~15 min on 2 idle cores). From the repository root, after
# both train stages: bash docs/results/run36_bf16_2026-12-07/compare.sh
set -euo pipefail
D=docs/results/run36_bf16_2026-12-07
W=${W:-$HOME/.cache/sglang_cast/rebuild}
PY=.venv/bin/python
$PY - $W/run36/train/log.jsonl $W/run36_bf16/train/log.jsonl <<'PY' | tee $D/val.md
import json, sys
rows = {name: json.loads(open(path).read().splitlines()[-1]) for name, path in zip(("fp32", "bf16"), sys.argv[1:])}
print("| training | steps | train seconds | held-out accuracy, unrolled steps 0…6 | held-out loss, steps 0…6 |")
print("| --- | --- | --- | --- | --- |")
for name, row in rows.items():
    print(f"| {name} | {row['step']} | {row['seconds']:.0f} | " + ", ".join(f"{a:.4f}" for a in row["val_acc"])
          + " | " + ", ".join(f"{x:.3f}" for x in row["val_loss"]) + " |")
print("| bf16 − fp32 | | | " + ", ".join(f"{b - a:+.4f}" for a, b in zip(rows["fp32"]["val_acc"], rows["bf16"]["val_acc"]))
      + " | " + ", ".join(f"{b - a:+.3f}" for a, b in zip(rows["fp32"]["val_loss"], rows["bf16"]["val_loss"])) + " |")
PY
for b in humaneval mt_bench; do
  $PY tools/compare_heads.py decode $D/$b.json $b --prompts 0:20 run36=docs/results/run36_2026-12-07/head \
      run36_bf16=$W/run36_bf16/head 2>&1 | grep -a -v USDT | tr '\r' '\n' | grep -a -v '%|\|^\s*$' | tee -a $D/$b.log || true
  $PY tools/compare_heads.py summary $D/$b.json --baseline run36 > $D/${b}_summary.md
done
