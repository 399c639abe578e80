"""End-to-end speed of every tree policy on the native engine, in one process.

    python tools/bench.py --methods vanilla,eagle2,eagle2-best,cast,goodput \\
        --dataset datasets/mt_bench.jsonl --batch-size 1,8 --temperature 0,1 \\
        --num-prompts 16 --max-new-tokens 128 --json docs/results/bench_mt_bench.json

Every method decodes the same prompts (first turn of each record's ``turns``, in the
model's chat template) on the same loaded target and draft, one engine per (method,
batch size).  ``--batch-size B`` means continuous batching with at most B running
sequences; all prompts are submitted at once, so the batch stays full until the queue
drains.

Timing (``tools/benchkit/rounds.py``): at every batch size each method first decodes
the whole workload once untimed (first-use costs excluded), then ``--rounds`` rounds
(default 3) run the methods interleaved, A B C C B A A B C ...; a record's tokens/s is the
median over its rounds, with every round's value, min, max and spread in the JSON, and
speedups are medians over medians of the same interleaved run (each round's paired
ratio kept beside them).

Device: ``--device cpu|cuda|cuda:N`` and ``--dtype float32|bfloat16|float16``; every
record names the device (the GPU's name, or the CPU model) and the weight format that
runs (on CUDA the dense weights in ``--dtype``, e.g. ``bf16``).  On CUDA the clock
synchronises the device before it is read.

Methods (docs/design/cast.md §7):

* ``vanilla`` – plain decoding, the baseline every speedup is relative to;
* ``eagle2`` – EAGLE-2's default static tree (depth 6, top-k 10, 60 tokens);
* ``eagle2-best`` – the best static (depth, top-k, tokens) for the batch size's
  profile bucket, chosen by trace replay over a grid on the autotuner's traces
  (tuning prompts, never the benchmark prompts): what a per-batch tree dispatcher
  would pick;
* ``cast``, ``goodput`` – the profile's tuned settings;
* ablation (the paper's Table 3): ``cast-rerank`` (EAGLE-2's tree + cost-aware
  rerank), ``cast-rerank-depth`` (+ depth pruning), ``cast`` (+ breadth pruning),
  and ``cast-depth-breadth`` (depth + breadth pruning, EAGLE-2's verify rule: the
  paper's EAGLE-3+DR+BP row).
  A suffix ``@eagle2`` runs a method on EAGLE-2's default tree shape instead of the
  profile's tuned shape (thresholds still from the profile; every bucket drafts, as
  the profile's ``speculate: false`` is ours, not one of the paper's components), so
  ``eagle2,cast-rerank@eagle2,cast-rerank-depth@eagle2,cast@eagle2`` adds one
  component at a time to the same tree.

* ``llamacpp`` – the anchor: llama.cpp (llama-cpp-python) on the same GGUF, the
  same prompt tokens and thread count, greedy, batch 1 only (it decodes one sequence
  at a time); see ``tools/benchkit/anchor.py``.  Skipped with one line when the
  optional extra is absent (``bash run.sh anchors`` builds it) or the model is not a
  GGUF.  Every batch-1 greedy record then carries ``speedup_vs_llamacpp``.

The paper's figures, from EAGLE-2's default tree (depth 6, top-k 10) at every verify
budget ``--budgets`` m, with vanilla per batch size as baseline and lossless reference:

    python tools/bench.py --figure acceptance --dataset datasets/mt_bench.jsonl \\
        --num-prompts 4 --max-new-tokens 64 --json docs/results/figures/fig3_acceptance.json
    python tools/bench.py --figure verify-budget --batch-size 1,2 ...   # Fig. 4

* ``acceptance`` (Fig. 3): acceptance length τ per sequence and iteration against the
  cumulative value (summed path values) of the nodes it verified;
* ``verify-budget`` (Fig. 4): tokens/s against m per batch size, the best m marked.

The PNG goes to ``--plot`` (default: the ``--json`` path with ``.png``).

Greedy runs (temperature 0) check losslessness: every method's tokens must equal
vanilla's for every prompt.  A mismatch is printed to stderr, recorded in the JSON
(``lossless: false`` and where it diverged) and makes the exit status 1 after the
results are written.  ``--weight-format auto`` (the default) resolves as the server
does (``sglang_cast/engine/format_choice.py``: the profile's recorded format, else the
cheapest in a few timed forwards); every record names the format it ran.  With packed
or reduced-precision weights, or on CUDA, a verified tree and a single token run
different kernels, so an argmax may flip where the target's top two logits tie within
the kernels' rounding: each first divergence is then judged on what the two kernel
paths compute at that position (``models/numerics.py``, ``judge_by_kernel_paths``: a
near-tie when both tokens lie within the measured spread of the top in both paths),
recorded with its gap and tolerance (the record keeps ``largest_gap``), and only a
divergence that is no near-tie fails the run (``near_ties_only``).
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
