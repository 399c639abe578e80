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

Where the decisions run: the policies compute on host float64 (their cost rows are
host tensors), while the tree lives on the drafting device.  Each decision therefore
gets one host copy of exactly what it reads, made here: the layer's candidate values
for ``keep``, the tree for ``verify_count`` (`decide_verified`).  On a CPU engine
both copies are the tensors themselves.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .policies import IterationPlan
from .tree import DraftTree, TreeStorage, node_slice, to_host


class Expander(Protocol):
    def expand(self, tree: DraftTree, frontier: range, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``top_k`` children of the ``frontier`` nodes (ids, the same in every
        sequence): draft probabilities and tokens, each ``[B, n, top_k]``, best first."""
        ...


def ranked_children(tree: DraftTree, frontier: range, child_probs: torch.Tensor,
                    child_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All children of ``frontier`` by value, best first: ``(values, tokens, parent
    ids)``, each ``[B, n·K]``.  Ties keep the earlier parent and the more probable
    child (stable sort)."""
    batch, n, k = child_probs.shape
    parent_values = tree.values[:, node_slice(frontier)].unsqueeze(-1)  # [B, n, 1]
    values = (parent_values * child_probs.to(tree.values.dtype)).view(batch, n * k)
    values, order = torch.sort(values, dim=1, descending=True, stable=True)
    parents = torch.div(order, k, rounding_mode="floor").add_(frontier.start)
    return values, child_tokens.reshape(batch, n * k).gather(1, order), parents


def grow_tree(plan: IterationPlan, expander: Expander, root_tokens: torch.Tensor,
              room: TreeStorage | None = None) -> DraftTree:
    """Grow one draft tree per sequence under ``plan``'s decisions (in ``room``, an
    earlier tree's storage, when it fits: `DraftTree.from_roots`).

    The frontier is always the kept prefix of the newest layer: consecutive node ids,
    the same in every sequence, so it is a ``range`` and reading it is a slice."""
    if plan.max_depth == 0:
        return DraftTree.from_roots(root_tokens)
    tree = DraftTree.from_roots(root_tokens, capacity=1 + plan.bucket.shape.pool_size, room=room)
    frontier, layer = range(0, 1), 1
    while True:
        probs, tokens = expander.expand(tree, frontier, plan.top_k)
        values, child_tokens, parents = ranked_children(tree, frontier, probs, tokens)  # [B, n·K]
        keep = plan.keep(layer, to_host(values[:, : plan.top_k]))  # the layer's candidates: the best K
        # Every child enters the rerank pool; the kept ones (the first ``keep``) are the next frontier.
        frontier = tree.add_layer(child_tokens, parents, values)[:keep]
        if not plan.grow(layer):
            return tree
        layer += 1


def decide_verified(plan: IterationPlan, tree: DraftTree) -> int:
    """How many ranked nodes per sequence to verify: the plan's rerank on a host copy
    of ``tree`` (one device-to-host copy)."""
    return plan.verify_count(tree.host_copy())
