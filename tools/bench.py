"""End-to-end speed of every tree policy on the native engine, in one process, each
method interleaved with the others round by round (docs/benchmarks.md: how to run,
the records' fields, current numbers).

    python tools/bench.py --methods vanilla,eagle2,eagle2-best,cast,goodput \\
        --dataset datasets/mt_bench.jsonl --batch-size 1,8 --num-prompts 16 --json out.json

Methods (docs/design/cast.md §7): vanilla (plain decoding, the baseline of every
speedup); eagle2 (EAGLE-2's default tree: depth 6, top-k 10, 60 tokens); eagle2-best
(the best static tree per batch size by trace replay on the autotuner's traces); cast,
goodput (the profile's tuned settings); the ablation cast-rerank, cast-rerank-depth,
cast-depth-breadth; a suffix @eagle2 runs a method on EAGLE-2's tree, a suffix +lookup
adds the prompt-lookup branch to its trees (cast/context_lookup.py; cast+lookup,
eagle2+lookup) and +nolookup leaves it out where the profile's buckets chose it
(cast+nolookup); llamacpp (the
llama.cpp anchor on the same GGUF, batch 1; `bash run.sh anchors` builds it).
--against-profile OLD.yaml runs every profile-shaped method (cast, goodput, ...) again under
another profile of the same weight format, labelled cast@OLD.yaml, in the same rounds: how a
re-tuned profile is judged against the one it replaces.
--figure acceptance|verify-budget draws the paper's Fig. 3 / Fig. 4 instead.

Greedy runs check losslessness against vanilla (a divergence that is no measured
near-tie of the kernels makes the exit status 1, after the JSON is written).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import this checkout's packages, not an installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.benchkit import cli  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's) and run; 0 ok, 1 a failed lossless check, 2 bad input."""
    return cli.main(argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
