"""The expansion loop (docs/design/cast.md §4), shared by the live engines and trace replay.

Layer 1's candidates are the root's top-``K`` children; for layer ``i >= 2`` every
node kept in layer ``i - 1`` proposes its top-``K`` children (value = parent value
× child probability), and the layer's candidates are the best ``K`` of those, per
sequence.  The plan decides how many candidates to keep (and so expand next) and
whether to go on.  Every drafted child — all ``n·K`` of a layer, kept or not —
joins the tree as a node, so the rerank chooses from the full pool EAGLE-2 ranks
(``K + (H-1)·K²`` nodes at full width); the children that are not kept stay
leaves and cost no draft forward.  An ``Expander`` supplies the children — from
the draft model in an engine, from a recorded trace in replay — so the decisions
are made by one piece of code.

The tree and the decisions live on the host (cast/tree.py): an ``Expander`` hands
back each layer's children as host arrays (one copy per layer from a device), and
the ranking, the policy's ``keep`` and the tree's new layer are NumPy and Python on
the host.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .policies import IterationPlan
from .tree import DraftTree, TreeStorage, node_slice


class Expander(Protocol):
    def expand(self, tree: DraftTree, frontier: range, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``top_k`` children of the ``frontier`` nodes (ids, the same in every
        sequence): draft probabilities (float64) and tokens (int64), each ``[B, n,
        top_k]`` host arrays, best first."""
        ...


def ranked_children(tree: DraftTree, frontier: range, child_probs: np.ndarray,
                    child_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All children of ``frontier`` by value, best first: ``(values, tokens, parent
    ids)``, each ``[B, n·K]``.  Ties keep the earlier parent and the more probable
    child (stable sort)."""
    batch, n, k = child_probs.shape
    values = (tree.values[:, node_slice(frontier), None] * child_probs).reshape(batch, n * k)
    order = (-values).argsort(axis=1, kind="stable")
    rows = tree.storage.rows
    return values[rows, order], child_tokens.reshape(batch, n * k)[rows, order], order // k + frontier.start


def grow_tree(plan: IterationPlan, expander: Expander, root_tokens, room: TreeStorage | None = None) -> DraftTree:
    """Grow one draft tree per sequence from ``root_tokens`` (``[B]``, on the host)
    under ``plan``'s decisions (in ``room``, an earlier tree's storage, when it fits:
    `DraftTree.from_roots`).

    The frontier is always the kept prefix of the newest layer: consecutive node ids,
    the same in every sequence, so it is a ``range`` and reading it is a slice."""
    if plan.max_depth == 0:
        return DraftTree.from_roots(root_tokens, room=room)
    tree = DraftTree.from_roots(root_tokens, capacity=1 + plan.bucket.shape.pool_size, room=room)
    frontier, layer = range(0, 1), 1
    while True:
        probs, tokens = expander.expand(tree, frontier, plan.top_k)
        values, child_tokens, parents = ranked_children(tree, frontier, probs, tokens)  # [B, n·K]
        keep = plan.keep(layer, values[:, : plan.top_k])  # the layer's candidates: the best K
        # Every child enters the rerank pool; the kept ones (the first ``keep``) are the next frontier.
        frontier = tree.add_layer(child_tokens, parents, values)[:keep]
        if not plan.grow(layer):
            return tree
        layer += 1


def decide_verified(plan: IterationPlan, tree: DraftTree) -> int:
    """How many ranked nodes per sequence to verify: the plan's rerank."""
    return plan.verify_count(tree)
