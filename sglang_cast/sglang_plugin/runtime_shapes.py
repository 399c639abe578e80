"""Which runtime states the worker pre-builds, and which one an iteration uses.

SGLang sizes a speculative iteration by two numbers fixed in its CUDA graphs and
attention metadata: draft steps (depth) and verified tokens per request (width,
root included).  Its adaptive mechanism builds one ``SpecRuntimeState`` per
shape at startup and swaps them between iterations.  The worker does the same
over a small catalogue of (depth, width) pairs:

* depth is chosen *before* drafting, from the policy's forecast
  (``IterationPlan.reachable_depth``): the smallest pre-built depth that holds it;
* width is chosen *after* the rerank: the smallest pre-built width that holds the
  nodes the policy wants verified, among the widths that depth can fill.

A profile tuned for SGLang names its states (``provenance.sglang.runtime_states``,
chosen by ``state_cover`` from what trace replay of its policy reaches).  For a
profile without them the worker falls back to a grid: the powers of two below
the startup shape, every profile bucket's own value (its widths: ``layer_widths``)
and the startup value itself, a state never more than twice what the policy asked
for.

A profile bucket with ``speculate: false`` adds SGLang's zero-step state
(``NO_DRAFT``: no draft, one verified token, i.e. plain decoding), which
SGLang's EAGLE v2 worker runs without calling the draft at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cast import TreeShape

NO_DRAFT = (0, 1)  # (depth, width) of SGLang's zero-step state
FLOOR_WIDTH = 2  # one draft node plus the root: every drafted tree fills it


def _catalogue(maximum: int, bucket_values: Sequence[int], minimum: int) -> tuple[int, ...]:
    values = {maximum} | {v for v in bucket_values if minimum <= v <= maximum}
    power = 1
    while power < maximum:
        if power >= minimum:
            values.add(power)
        power *= 2
    return tuple(sorted(values))


def draft_depths(max_steps: int, bucket_depths: Sequence[int]) -> tuple[int, ...]:
    """Draft depths to pre-build states for (1 is always there: a layer-1-only tree)."""
    if max_steps < 1:
        raise ValueError(f"the draft depth (--speculative-num-steps) must be >= 1, got {max_steps}")
    return _catalogue(max_steps, bucket_depths, 1)


def layer_widths(shape: TreeShape) -> tuple[int, int]:
    """The widths a bucket's trees ask of the fallback grid: its ``num_verify_tokens``
    and its one-layer tree whole (``1 + top_k``).  Most CAST iterations draft one
    layer and verify all of it; without that width a top-k-2 bucket verified one of
    its two nodes (the grid's next width, 4, needs three), and SGLang accepted 5 %
    less than the native engine at batch 1 (docs/results/2026-11-30_reachable_depth.md)."""
    return shape.num_verify_tokens, 1 + shape.top_k


def verify_widths(max_width: int, bucket_widths: Sequence[int]) -> tuple[int, ...]:
    """Verify widths (tokens per request, root included) to pre-build states for."""
    if max_width < 2:
        raise ValueError(f"the verify width counts the root and must be >= 2, got {max_width}")
    return _catalogue(max_width, bucket_widths, 2)


def max_nodes(topk: int, depth: int) -> int:
    """The most draft nodes a ``depth``-layer tree offers the rerank in SGLang's
    layout: the root's ``topk`` children, then the ``topk`` children of each of
    ``topk`` frontier rows per deeper layer.  Every drafted child joins the rerank
    pool (``drafting.draft_masked_tree``), not only the frontier it keeps."""
    return topk + topk * topk * (depth - 1)


def fills(width: int, depth: int, topk: int) -> bool:
    """Whether a ``depth``-layer tree of ``topk`` can fill a verify ``width``: at most
    ``max_nodes`` draft nodes plus the root.  A state wider than that could never be
    chosen, so it is neither built nor accepted from a profile."""
    return width - 1 <= max_nodes(topk, depth)


def widths_at_depth(widths: Sequence[int], depth: int, topk: int) -> tuple[int, ...]:
    """The widths a ``depth``-layer CAST tree can fill (``fills``)."""
    return tuple(w for w in widths if fills(w, depth, topk))


def choose_depth(predicted: int, depths: Sequence[int]) -> int:
    """The smallest pre-built depth holding ``predicted`` layers (the largest if none)."""
    return next((d for d in sorted(depths) if d >= predicted), max(depths))


def choose_width(wanted_nodes: int, available_nodes: int, widths: Sequence[int]) -> int:
    """The pre-built width for verifying ``wanted_nodes`` draft nodes of a tree that
    has ``available_nodes``: the smallest width holding them all, else the largest
    the tree can fill (then the best ``width - 1`` nodes are verified)."""
    fitting = [w for w in sorted(widths) if w - 1 <= available_nodes]
    if not fitting:
        raise ValueError(f"no pre-built verify width fits a tree of {available_nodes} draft nodes "
                         f"(widths {sorted(widths)})")
    return next((w for w in fitting if w - 1 >= wanted_nodes), fitting[-1])
