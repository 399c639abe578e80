"""Two checkouts' host work per B = 1 iteration, stage by stage (stages.py run from each
checkout's root), alternating one process per arm per round so the VM's drift hits both
alike.  Prints each arm's median over rounds of the per-round medians, and the per-round
difference of the totals.
Usage: ab_checkouts.py BEFORE_ROOT AFTER_ROOT POLICY ROUNDS [DATASET] [PROMPTS]"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

before, after, policy, rounds, *rest = sys.argv[1:]
script = "docs/results/host_work_2026-12-05/stages.py"
runs = {"before": [], "after": []}
for r in range(int(rounds)):
    for name, root in (("before", before), ("after", after)):
        out = subprocess.run([str(Path(root) / ".venv/bin/python") if (Path(root) / ".venv").exists()
                              else sys.executable, script, policy, "2", *rest],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        runs[name].append(json.loads(out.strip().splitlines()[-1]))
        print(f"round {r} {name}: total {runs[name][-1]['total']:.3f} ms", flush=True)
stages = list(runs["before"][0])
print(f"{policy} {' '.join(rest)}: ms outside forwards per iteration, median of {rounds} rounds' medians")
print(f"  {'stage':9s} {'before':>7s} {'after':>7s}")
for stage in stages:
    b, a = (statistics.median(x[stage] for x in runs[n]) for n in ("before", "after"))
    print(f"  {stage:9s} {b:7.3f} {a:7.3f}")
diffs = [a["total"] - b["total"] for a, b in zip(runs["after"], runs["before"])]
print(f"  after - before, total, per round: median {statistics.median(diffs):+.3f} "
      f"(min {min(diffs):+.3f}, max {max(diffs):+.3f})")
