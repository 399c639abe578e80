"""Below top-1: where a head ranks the target's next token, and how well its
probabilities (the tree's node values) are calibrated, teacher-forced at unrolled
steps 0 and 1 (a root's children and their children in the engine's tree).

Why: head run 20 ended more EAGLE-2-tree iterations with nothing accepted than run 15
(humaneval, all 80 first turns: 26.0 % against 24.6 %) at level top-1 accuracy. A
depth-1 miss means the target's token is not among the root's verified children, so
recall@k of the root expansion (step 0) and the values that pick the verified set are
the candidates. Scored on the draft_gap caches (the target's greedy 128-token answers to
the 80 first turns of each benchmark, features as in training) and the held-out seed-12
work dir, with the training code's `ttt_forward`.

Usage (repository root, .venv python):
  python docs/results/depth1_recall_2026-12-01/recall.py OUT.json NAME=HEAD_DIR ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from sglang_cast.models import load_draft
from sglang_cast.training.features import FeatureSet, collate
from sglang_cast.training.gap import held_out_indices
from sglang_cast.training.target import Target
from sglang_cast.training.ttt import ttt_forward
from sglang_cast.training.vocab import target_to_draft

W = Path.home() / ".cache/sglang_cast/rebuild"
SETS = {"humaneval": W / "heldout/gap/humaneval-80x128", "mt_bench": W / "heldout/gap/mt_bench-80x128",
        "held-out": W / "heldout/responses"}
KS = (1, 2, 3, 4, 6, 8, 10)  # EAGLE-2's tree expands the root's top 10
STEPS = 2
BINS = torch.linspace(0, 1, 11)


def ranks_and_probs(draft, fs: FeatureSet, indices: list[int], to_draft: torch.Tensor):
    """Per step: the label's rank among the draft's logits (0 = top-1; a large number
    outside the draft vocab), the label's probability and the top-1 probability."""
    out = [([], [], []) for _ in range(STEPS)]
    with torch.no_grad():
        for start in range(0, len(indices), 8):
            batch = collate(fs, indices[start: start + 8], to_draft)
            for step, hidden in enumerate(ttt_forward(draft, batch.input_ids, batch.features, STEPS)):
                mask = batch.step_mask(step)
                probs = torch.softmax(draft.lm_head(draft.norm(hidden[mask])), dim=-1)
                labels = batch.labels[mask]
                known = labels >= 0
                label_p = torch.where(known, probs.gather(1, labels.clamp(min=0)[:, None])[:, 0], 0.0)
                rank = torch.where(known, (probs > label_p[:, None]).sum(1), 10**6)
                out[step][0].append(rank)
                out[step][1].append(label_p)
                out[step][2].append(probs.max(1).values)
    return [tuple(torch.cat(part) for part in parts) for parts in out]


def summary(rank: torch.Tensor, label_p: torch.Tensor, top_p: torch.Tensor) -> dict:
    """recall@k, the label's mean log-probability, and the top-1 probability's calibration
    (expected calibration error over 10 bins; mean confidence against accuracy)."""
    hit = (rank == 0).float()
    which = torch.bucketize(top_p, BINS[1:-1])
    ece = sum(float((which == b).sum()) * abs(float(top_p[which == b].mean() - hit[which == b].mean()))
              for b in range(10) if bool((which == b).any())) / len(rank)
    return {"positions": len(rank), "recall": {k: float((rank < k).float().mean()) for k in KS},
            "outside_vocab": float((rank >= 10**6).float().mean()), "mean_log_p": float(torch.log(label_p.clamp(min=1e-9)).mean()),
            "top1_confidence": float(top_p.mean()), "top1_accuracy": float(hit.mean()), "ece": ece,
            "mass_top10_miss": float(label_p[rank >= 10].mean()) if bool((rank >= 10).any()) else 0.0}


def main() -> None:
    out, heads = Path(sys.argv[1]), dict(arg.split("=", 1) for arg in sys.argv[2:])
    torch.set_num_threads(2)
    target = Target.embedded()
    report: dict = {}
    for name, head in heads.items():
        draft = load_draft(head, target.model, "cpu", torch.float32)
        to_draft = target_to_draft(draft.t2d)
        for data, path in SETS.items():
            fs = FeatureSet.open(path, 512)
            indices = held_out_indices(W / "heldout", fs) if data == "held-out" else list(range(len(fs)))
            for step, parts in enumerate(ranks_and_probs(draft, fs, indices, to_draft)):
                entry = report.setdefault(data, {}).setdefault(f"step{step}", {})[name] = summary(*parts)
                print(f"{data:9} step {step} {name:6} " + " ".join(f"@{k} {v:.3f}" for k, v in entry["recall"].items())
                      + f"  oov {entry['outside_vocab']:.3f} logp {entry['mean_log_p']:.3f} conf {entry['top1_confidence']:.3f} "
                        f"acc {entry['top1_accuracy']:.3f} ece {entry['ece']:.3f}", flush=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
