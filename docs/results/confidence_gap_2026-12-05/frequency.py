"""The head's step-0 recall by how often the token occurs in answers of its training kind (the record's third table).

Frequencies are counted on the first half of the held-out answers (seed 12, `confidence_gap.py`'s), a stand-in for
the head's exposure in training; the held-out rows score the second half only.

    .venv/bin/python docs/results/confidence_gap_2026-12-05/frequency.py docs/results/confidence_gap_2026-12-05
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

BUCKETS = ((0, 0), (1, 4), (5, 49), (50, None))  # occurrences in the counting half
KINDS = {0: "other", 1: "copy"}  # confidence_gap.OTHER / COPY; tokens outside the draft vocabulary are left out


def main(folder: Path) -> None:
    z = np.load(folder / "positions.npz")
    answers = json.loads((folder / "answers.json").read_text())
    sets = {name: {key.split(".", 1)[1]: z[key] for key in z.files if key.startswith(name + ".")}
            for name in ("held_out", "mt_bench", "humaneval")}
    held = answers["held_out"]
    half = len(held["ids"]) // 2
    counts = np.zeros(max(max(ids) for ids in held["ids"]) + 50_000, dtype=np.int64)
    for ids, start in zip(held["ids"][:half], held["starts"][:half]):
        np.add.at(counts, np.array(ids[start:]), 1)
    first = sum(max(len(ids) - 2 - max(start - 2, 0), 0) for ids, start in zip(held["ids"][:half], held["starts"][:half]))
    sets["held_out"] = {key: value[first:] for key, value in sets["held_out"].items()}
    print("| set | occurrences | kind | share | target p1 | top-1 | top-10 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, pos in sets.items():
        freq = counts[pos["token"]]
        for low, high in BUCKETS:
            for kind, label in KINDS.items():
                sel = (freq >= low) & (freq <= (high if high is not None else freq.max())) & (pos["kind"] == kind)
                print(f"| {name} | {low}-{high if high is not None else ''} | {label} | {sel.mean():.3f} | "
                      f"{pos['p1'][sel].mean():.3f} | {pos['top1'][sel].mean():.3f} | {pos['top10'][sel].mean():.3f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
