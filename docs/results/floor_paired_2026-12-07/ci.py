"""CAST over plain decoding from bench runs' paired rounds: per batch size, the median of the per-round ratios
(each round's two decodes ran back to back) with its distribution-free 95 % interval (the order statistics that
bracket the median with binomial(n, 1/2) probability >= 0.95: no assumption about how the machine's noise is
distributed), the share of rounds below 1 and below 0.98, and the ratio of the two methods' median tokens/s.

    python ci.py bench_mt_bench_b8.json [...]
"""

import json
import statistics
import sys
from math import comb


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """(k-th smallest, k-th largest) for the largest k whose pair covers the median with probability >= level."""
    n, ordered = len(values), sorted(values)
    def cover(k: int) -> float:  # P(X_(k) <= median <= X_(n-1-k)), 0-based
        return sum(comb(n, i) for i in range(k + 1, n - k)) / 2 ** n
    covering = [k for k in range(n // 2) if cover(k) >= level]
    if not covering:
        raise SystemExit(f"{n} rounds are too few for a {level:.0%} interval of the median (6 at least)")
    return ordered[max(covering)], ordered[n - 1 - max(covering)]


def report(dataset: str, cast: dict, plain: dict) -> None:
    ratios = cast["speedup_vs_vanilla_rounds"]
    low, high = median_interval(ratios)
    print(f"{dataset} {cast['batch_size']} {len(ratios)} | {statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]"
          f" | {sum(r < 1 for r in ratios)} / {sum(r < 0.98 for r in ratios)}"
          f" | {plain['tokens_per_s']:.1f}, {cast['tokens_per_s']:.1f} | {cast['lossless']}")


print("dataset B rounds | median ratio [95 % interval] | rounds <1 / <0.98 | tok/s plain, cast (medians) | lossless")
for path in sys.argv[1:]:
    run = json.load(open(path))
    for b in sorted({r["batch_size"] for r in run["records"]}):
        records = {r["method"]: r for r in run["records"] if r["batch_size"] == b}
        report(run["dataset"], records["cast"], records["vanilla"])
