"""``plot``: PNG figures of the cost curves and of the tuning history.

Cost curves are drawn as ``f(B, c, n) / f(B, c, 1)`` against ``n``, one line per
batch size, target and draft side by side: the flat-then-rising shape is what
decides how large a tree pays off.  Markers are the timed points only; the shaded
band is each point's p10–p90 over the same f(1) median, i.e. how noisy it was.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from .report import StudyHistory  # noqa: E402
from .store import Measurement  # noqa: E402


def plot_cost_curves(rows: list[Measurement], context: int, title: str, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, role in zip(axes, ("target", "draft")):
        curves: dict[int, dict[int, Measurement]] = defaultdict(dict)
        for row in rows:
            if row.role == role and row.context_len == context:
                curves[row.batch_size][row.n] = row
        for batch in sorted(curves):
            points = curves[batch]
            if 1 not in points:
                continue
            ns = sorted(points)
            base = points[1].median_ms
            line, = ax.plot(ns, [points[n].median_ms / base for n in ns], marker="o", markersize=3,
                            label=f"B={batch} (f(1)={base:.3g} ms)")
            ax.fill_between(ns, [points[n].p10_ms / base for n in ns], [points[n].p90_ms / base for n in ns],
                            color=line.get_color(), alpha=0.12, linewidth=0)
        ax.set_title(f"{role}: f(B, c={context}, n) / f(B, c, 1)")
        ax.set_xlabel("n (new tokens per sequence)")
        ax.set_ylabel("cost relative to n = 1")
        ax.grid(True, alpha=0.3)
        if curves:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_histories(histories: list[StudyHistory], path: Path) -> Path:
    count = max(1, len(histories))
    fig, axes = plt.subplots(count, 1, figsize=(9, 3.2 * count), squeeze=False)
    for ax, history in zip(axes[:, 0], histories):
        numbers = [n for n, _ in history.values]
        ax.scatter(numbers, [v for _, v in history.values], s=12, alpha=0.6, label="trial objective")
        ax.step(numbers, history.best_so_far, where="post", color="C3", label="best so far")
        ax.set_title(history.name, fontsize=10)
        ax.set_xlabel("trial")
        ax.set_ylabel("replayed tokens/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
