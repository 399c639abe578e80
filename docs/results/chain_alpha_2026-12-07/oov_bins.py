"""The share of benchmark answer positions whose token lies outside the draft vocabulary, per bin of the target's
confidence in it (draft_gap's bins; no forward: the vocabulary is the head's, the confidence the cached top 4).
Usage: .venv/bin/python docs/results/chain_alpha_2026-12-07/oov_bins.py HEAD HELD_OUT_WORK_DIR"""

import sys
from pathlib import Path

from safetensors.torch import load_file

from sglang_cast.training import gap
from sglang_cast.training.features import FeatureSet, collate
from sglang_cast.training.vocab import target_to_draft

head, work = Path(sys.argv[1]), Path(sys.argv[2])
to_draft = target_to_draft(load_file(str(head / "model.safetensors"))["t2d"])
edges = gap.CONFIDENCE_EDGES
for name in ("mt_bench", "humaneval"):
    fs = FeatureSet.open(work / "gap" / f"{name}-80x128", 512)
    batch = collate(fs, range(len(fs)), to_draft)
    mask = batch.step_mask(0)
    p, outside = batch.soft_probs[mask][:, 0], batch.labels[mask] < 0  # [N], [N]
    bins = []
    for low, high in zip(edges, edges[1:]):
        chosen = (p >= low) & ((p < high) if high < edges[-1] else (p <= high))
        bins.append(f"{low:.1f}-{high:.1f}: {100 * float(outside[chosen].float().mean()):.1f} %")
    print(f"{name}: outside the draft vocab, all {100 * float(outside.float().mean()):.1f} %; " + "; ".join(bins))
