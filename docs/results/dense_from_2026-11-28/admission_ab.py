"""Admission (prefill) of the same prompts in two weight formats, interleaved in one process.

    python docs/results/dense_from_2026-11-28/admission_ab.py int4/int8+int8 int4/int8:dense32+int8 \
        --num-prompts 16 --rounds 6 --profile profiles/cpu-avx2.yaml

Each round admits every prompt once per format (the engine's own grouped admission,
`tools/prefill_ab.py`'s ``grouped`` variant), alternating the order between rounds;
prints each format's median ms and the per-round ratio second / first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from tools.prefill_ab import Admission  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("formats", nargs=2)
    p.add_argument("--profile", default="profiles/cpu-avx2.yaml")
    p.add_argument("--dataset", type=Path, default=Path("datasets/mt_bench.jsonl"))
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    engines = {}
    for fmt in args.formats:
        engines[fmt] = Admission(argparse.Namespace(**{**vars(args), "weight_format": fmt}))
        engines[fmt].group_sizes()  # the untimed first admission
    rounds = {fmt: [] for fmt in args.formats}
    for i in range(args.rounds):
        for fmt in args.formats if i % 2 == 0 else args.formats[::-1]:
            rounds[fmt].append(engines[fmt].run("grouped"))
    first, second = args.formats
    print(f"prompt lengths {engines[first].lengths}")
    for fmt, ms in rounds.items():
        print(f"{fmt:>28}: median {statistics.median(ms):.0f} ms  rounds {[round(x) for x in ms]}")
    ratios = [b / a for a, b in zip(rounds[first], rounds[second])]
    print(f"{second} / {first}: median {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")


if __name__ == "__main__":
    main()
