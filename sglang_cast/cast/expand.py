"""The expansion loop (docs/design/cast.md §4), shared by the live engines and trace replay.

Layer 1's candidates are the root's top-``K`` children; for layer ``i >= 2`` every
node kept in layer ``i - 1`` proposes its top-``K`` children (value = parent value
× child probability) and the candidates are the best ``K`` of those, per
sequence.  The plan decides how many candidates to keep and whether to go on;
an ``Expander`` supplies the children — from the draft model in an engine, from
a recorded trace in replay — so the decisions are made by one piece of code.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .policies import IterationPlan
from .tree import DraftTree


class Expander(Protocol):
    def expand(self, tree: DraftTree, frontier: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``top_k`` children of the ``frontier`` node ids ``[B, n]``: draft
        probabilities and tokens, each ``[B, n, top_k]``, best first."""
        ...


def top_candidates(tree: DraftTree, frontier: torch.Tensor, child_probs: torch.Tensor,
                   child_tokens: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best ``top_k`` children of ``frontier`` by value, best first:
    ``(values, tokens, parent ids)``, each ``[B, min(top_k, n·K)]``.  Ties keep the
    earlier parent and the more probable child (stable sort)."""
    batch, n, k = child_probs.shape
    values = (tree.values.gather(1, frontier).unsqueeze(-1) * child_probs.to(tree.values.dtype)).view(batch, n * k)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices[:, :top_k]
    parents = frontier.gather(1, order // k)
    return values.gather(1, order), child_tokens.reshape(batch, n * k).gather(1, order), parents


def grow_tree(plan: IterationPlan, expander: Expander, root_tokens: torch.Tensor) -> DraftTree:
    """Grow one draft tree per sequence under ``plan``'s decisions."""
    tree = DraftTree.from_roots(root_tokens)
    if plan.max_depth == 0:
        return tree
    frontier = torch.zeros((tree.batch_size, 1), dtype=torch.long, device=root_tokens.device)
    layer = 1
    while True:
        probs, tokens = expander.expand(tree, frontier, plan.top_k)
        values, cand_tokens, parents = top_candidates(tree, frontier, probs, tokens, plan.top_k)
        keep = plan.keep(layer, values)
        frontier = tree.add_layer(cand_tokens[:, :keep], parents[:, :keep], values[:, :keep])
        if not plan.grow(layer):
            return tree
        layer += 1
