"""Greedy losslessness: every method's tokens against vanilla's, and the near-tie judge.

Temperature 0 must reproduce plain decoding token for token.  In fp32 on the CPU the
engine is exactly that, so any difference fails.  Where the verify forward and plain
decoding round differently (packed or reduced-precision weights, bf16/fp16 activations,
CUDA's shape-dependent GEMM kernels), an argmax may flip at a near-tie; each first
divergence is then judged on what the two kernel paths compute at that position
(`models/numerics.py`, `judge_by_kernel_paths`): a near-tie when both tokens lie within
the measured spread of the top in both paths.  Each mismatch records its gap and
tolerance; the record keeps the largest gap seen.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from autotune.models import ModelPair
from sglang_cast.models.numerics import Divergence, judge_by_kernel_paths

# Judges one divergence: (prompt token ids, reference tokens, other tokens) -> verdict.
Judge = Callable[[list[int], list[int], list[int]], Divergence | None]


def needs_judge(weight_format: str, is_cuda: bool) -> bool:
    """Whether greedy runs may differ at near-ties: anything but fp32 weights and
    activations on the CPU (``weight_format`` names what runs, `format_choice.running_format`)."""
    return is_cuda or weight_format != "fp32"


def kernel_path_judge(pair: ModelPair) -> Judge:
    """`judge_by_kernel_paths` on the pair's target."""
    return lambda prompt_ids, reference, other: judge_by_kernel_paths(pair.target, prompt_ids, reference, other)


def divergences(outputs: list[list[int]], reference: list[list[int]]) -> list[dict]:
    """Where each prompt's tokens first differ from the reference's."""
    found = []
    for index, (ours, theirs) in enumerate(zip(outputs, reference)):
        if ours != theirs:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            found.append({"prompt": index, "first_diff_token": at, "lengths": [len(ours), len(theirs)]})
    return found


def greedy_check(pair: ModelPair, judge: Judge | None, prompts: list[str], outputs: list[list[int]],
                 reference: list[list[int]]) -> tuple[list[dict], bool | None]:
    """Where ``outputs`` first differ from vanilla's ``reference`` and, with ``judge``,
    whether every difference is a near-tie (``None``: not judged).  Each judged mismatch
    gains ``gap``, ``tolerance`` and ``near_tie``."""
    mismatches = divergences(outputs, reference)
    if not mismatches or judge is None:
        return mismatches, None
    for mismatch in mismatches:
        i = mismatch["prompt"]
        verdict = judge(pair.tokenizer.encode(prompts[i]), reference[i], outputs[i])
        if verdict is None:  # one run stopped (EOS) where the other went on: no logits pair to judge
            mismatch.update(near_tie=False, note="one run stopped where the other went on; not judged")
        else:
            mismatch.update(gap=verdict.gap, tolerance=verdict.tolerance, near_tie=verdict.near_tie)
    return mismatches, all(m["near_tie"] for m in mismatches)


def largest_gap(mismatches: list[dict] | None) -> float | None:
    """The largest judged gap among ``mismatches`` (None when none was judged)."""
    gaps = [m["gap"] for m in mismatches or [] if "gap" in m]
    return max(gaps) if gaps else None


def check_failed(record) -> bool:
    """Differs from vanilla in a way no near-tie explains (in fp32: differs at all)."""
    return record.lossless is False and not record.near_ties_only


def report_failure(what: str, mismatches: list[dict]) -> None:
    print(f"LOSSLESS CHECK FAILED: {what} differs from vanilla on {len(mismatches)} prompt(s): {mismatches[:3]}",
          file=sys.stderr)
