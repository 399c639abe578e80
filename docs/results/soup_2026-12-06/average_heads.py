"""Average draft heads weight by weight (a "model soup"): run 33 and run 34 both continue run 32's head, each on
its own seed's data, so their mean is run 32 moved by the mean of the two runs' updates.

    .venv/bin/python docs/results/soup_2026-12-06/average_heads.py OUT_DIR HEAD_DIR HEAD_DIR [...]

The heads must share config.json and every integer tensor (the draft vocabulary's d2t / t2d): a soup of heads
with different vocabularies would mean nothing. Floating tensors are averaged in fp32 and stored in the heads'
dtype; config.json is copied from the first head.
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def main(out: Path, heads: list[Path]) -> None:
    if len(heads) < 2:
        sys.exit("average_heads: give an output folder and at least two head folders")
    configs = [json.loads((h / "config.json").read_text()) for h in heads]
    if any(c != configs[0] for c in configs[1:]):
        sys.exit("average_heads: the heads' config.json differ")
    weights = [load_file(h / "model.safetensors") for h in heads]
    if any(w.keys() != weights[0].keys() for w in weights[1:]):
        sys.exit("average_heads: the heads hold different tensors")
    soup = {}
    for name, first in weights[0].items():
        if first.is_floating_point():
            soup[name] = (sum(w[name].float() for w in weights) / len(weights)).to(first.dtype)
        elif all(torch.equal(w[name], first) for w in weights[1:]):
            soup[name] = first
        else:
            sys.exit(f"average_heads: {name} differs between the heads (different draft vocabularies)")
    out.mkdir(parents=True, exist_ok=True)
    save_file(soup, out / "model.safetensors")
    shutil.copy(heads[0] / "config.json", out / "config.json")
    print(f"averaged {len(heads)} heads into {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
