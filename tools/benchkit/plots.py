"""Every PNG the tool writes: speedup vs batch size, and the paper's Fig. 3 and Fig. 4."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

from .figures import BudgetRun, acceptance_bins
from .methods import ANCHOR


def plot_speedups(records: list, path: Path, title: str) -> None:
    """Median speedup over vanilla against batch size, one line per (method, temperature)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (method, temperature), group in itertools.groupby(
            sorted(records, key=lambda r: (r.method, r.temperature, r.batch_size)),
            key=lambda r: (r.method, r.temperature)):
        group = [r for r in group if r.speedup_vs_vanilla is not None and r.method != ANCHOR]
        ax.plot([r.batch_size for r in group], [r.speedup_vs_vanilla for r in group], marker="o",
                label=f"{method} (T={temperature:g})")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("speedup vs vanilla (median tokens/s)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_acceptance(runs: list[BudgetRun], path: Path, title: str) -> None:
    """Fig. 3: τ against the verified set's cumulative value, every point faint, the
    mean of each m large, the binned mean as a line, and 1 + value for reference."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("viridis")
    budgets = sorted({r.num_verify_tokens for r in runs})
    points = [p for r in runs for p in r.points]
    for i, m in enumerate(budgets):
        mine = [p for r in runs if r.num_verify_tokens == m for p in r.points]
        colour = colours(i / max(len(budgets) - 1, 1))
        ax.scatter([v for v, _ in mine], [t for _, t in mine], s=6, alpha=0.15, color=colour)
        ax.scatter([statistics.fmean(v for v, _ in mine)], [statistics.fmean(t for _, t in mine)], s=60,
                   color=colour, edgecolor="black", zorder=3, label=f"m={m} (mean)")
    binned = acceptance_bins(points)
    ax.plot([b[0] for b in binned], [b[1] for b in binned], color="black", marker=".", label="binned mean τ")
    top = max(v for v, _ in points)
    ax.plot([0, top], [1, 1 + top], color="grey", lw=0.8, ls="--", label="1 + cumulative value")
    ax.set_xlabel("cumulative value of the verified set (predicted accepted draft tokens)")
    ax.set_ylabel("acceptance length τ (committed tokens per iteration)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _save(fig, path)


def plot_verify_budget(runs: list[BudgetRun], vanilla: dict[int, float], path: Path, title: str) -> None:
    """Fig. 4: median tokens/s against the verify budget m per batch size, best m
    starred, vanilla dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for batch_size in sorted({r.batch_size for r in runs}):
        mine = sorted((r for r in runs if r.batch_size == batch_size), key=lambda r: r.num_verify_tokens)
        line, = ax.plot([r.num_verify_tokens for r in mine], [r.tokens_per_s for r in mine], marker="o",
                        label=f"EAGLE-2 tree, batch {batch_size}")
        best = max(mine, key=lambda r: r.tokens_per_s)
        ax.scatter([best.num_verify_tokens], [best.tokens_per_s], marker="*", s=200, color=line.get_color(),
                   edgecolor="black", zorder=3, label=f"best m={best.num_verify_tokens}, batch {batch_size}")
        ax.axhline(vanilla[batch_size], color=line.get_color(), lw=0.8, ls="--", label=f"vanilla, batch {batch_size}")
    ax.set_xscale("log", base=2)
    budgets = sorted({r.num_verify_tokens for r in runs})
    ax.set_xticks(budgets, [str(m) for m in budgets])
    ax.set_xlabel("verify budget m (num_verify_tokens, root included)")
    ax.set_ylabel("tokens/s (median of interleaved rounds)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _save(fig, path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
