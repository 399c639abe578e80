"""Average draft heads weight by weight: a "soup" of sibling runs.

Heads continued from one parent by separate training runs (each on its own seed's prompts) move it by
updates that are partly the noise of their own data; their mean keeps what the runs share. The average
of runs 33 and 34 measured above both of them and above their parent on both benchmarks
(docs/results/2026-12-06_soup_avx512.md). Judge a soup like any head (tools/compare_heads.py).

Usage (repository root):
  .venv/bin/python tools/average_heads.py --output OUT_DIR HEAD_DIR HEAD_DIR [HEAD_DIR ...]

The heads must share ``config.json`` and every integer or boolean tensor (the draft vocabulary's
``d2t`` / ``t2d``): heads with different vocabularies do not average. Floating tensors are averaged in
fp32 and stored in the first head's dtype; ``config.json`` is copied from the first head.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS, CONFIG = "model.safetensors", "config.json"


class AverageError(ValueError):
    """Bad input, said in words that name the argument: printed, never a stack trace."""


def read_head(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """A head folder's config and tensors."""
    if not (folder / CONFIG).is_file() or not (folder / WEIGHTS).is_file():
        raise AverageError(f"HEAD_DIR {folder}: not a draft head folder (needs {CONFIG} and {WEIGHTS})")
    return json.loads((folder / CONFIG).read_text()), load_file(folder / WEIGHTS)


def average(heads: list[dict[str, torch.Tensor]], names: list[str]) -> dict[str, torch.Tensor]:
    """The mean of every floating tensor; the others must be equal in every head (``names`` for errors)."""
    first = heads[0]
    for name, head in zip(names[1:], heads[1:]):
        if head.keys() != first.keys():
            raise AverageError(f"HEAD_DIR {name}: holds other tensors than {names[0]} "
                               f"(differing: {sorted(head.keys() ^ first.keys())})")
    soup = {}
    for key, tensor in first.items():
        if tensor.is_floating_point():
            soup[key] = (sum(head[key].float() for head in heads) / len(heads)).to(tensor.dtype)
            continue
        for name, head in zip(names[1:], heads[1:]):
            if not torch.equal(head[key], tensor):
                raise AverageError(f"HEAD_DIR {name}: {key} differs from {names[0]}'s (another draft vocabulary); "
                                   "only heads that share it average")
        soup[key] = tensor
    return soup


def main(argv: list[str] | None = None) -> int:
    """Write the average of the heads; 0 on success, 2 on bad input (one line on stderr)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True, help="folder for the averaged head (created)")
    parser.add_argument("heads", type=Path, nargs="+", metavar="HEAD_DIR", help="two or more draft head folders")
    args = parser.parse_args(argv)
    try:
        if len(args.heads) < 2:
            raise AverageError("HEAD_DIR: give at least two heads to average")
        read = [read_head(folder) for folder in args.heads]
        names = [str(folder) for folder in args.heads]
        for name, (config, _) in zip(names[1:], read[1:]):
            if config != read[0][0]:
                raise AverageError(f"HEAD_DIR {name}: its {CONFIG} differs from {names[0]}'s")
        soup = average([weights for _, weights in read], names)
    except AverageError as error:
        print(f"average_heads: {error}", file=sys.stderr)
        return 2
    args.output.mkdir(parents=True, exist_ok=True)
    save_file(soup, args.output / WEIGHTS, metadata={"format": "pt"})  # as every head the project writes
    shutil.copy(args.heads[0] / CONFIG, args.output / CONFIG)
    print(f"averaged {len(args.heads)} heads into {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
