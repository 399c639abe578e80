"""Each layout's forward time over `stacked`'s per (model, rows), over all forward_ab.py runs in
a folder: the median and range over runs, and the geometric mean of the medians per load order
(the layout loaded first moves a forward's time a few per cent here, so runs rotate it).

Usage (repository root): .venv/bin/python docs/results/stacked_linears_2026-12-04/forward_ab_summary.py FOLDER"""
import json
import statistics
import sys
from pathlib import Path

runs = [json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("*.json"))]
assert all(all(r["identical"].values()) for r in runs), "a layout's logits differed from stacked's"
orders = sorted({",".join(r["layouts_in_load_order"]) for r in runs})
print(f"{len(runs)} runs in load orders {' | '.join(orders)}; logits bitwise identical in all; "
      "time over stacked's (> 1: stacked faster)")
for ratio in sorted(key for key in runs[0] if key.endswith("_over_stacked")):
    for key in runs[0][ratio]:
        values = [r[ratio][key] for r in runs]
        per_order = [statistics.median(r[ratio][key] for r in runs if ",".join(r["layouts_in_load_order"]) == order)
                     for order in orders]
        geo = statistics.geometric_mean(per_order)
        print(f"{ratio:18} {key:10} median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f}),"
              f" load orders' geomean {geo:.3f}")
