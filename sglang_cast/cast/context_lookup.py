"""A draft branch no model drafts: what followed the last tokens where they occurred
before in the same context (prompt lookup).

Answers often continue a span of their prompt (a restated signature and docstring, a
quoted name, an extracted field), and there the EAGLE head is weakest: on the shipped
head's answers it scores 0.44–0.49 where the answer copies its prompt against 0.76 on its
own training kind, while this lookup is right 68–76 % of the times it proposes
(docs/results/2026-11-29_passages_and_lookup_amx.md). Grafted onto the head's tree, its
tokens compete in the same rerank: each proposed node is valued like a drafted one (an
estimate that it is accepted), so the policy verifies it only where it is worth its
cost. Verification needs nothing new: greedy and sampled verification accept any
verified child that carries the target's token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tree import DraftTree


@dataclass(frozen=True)
class ContextLookup:
    """``depth`` tokens proposed per sequence after the latest earlier occurrence of its
    last ``ngram`` tokens; the ``i``-th (from 1) valued ``first_value * next_value**(i-1)``."""

    depth: int = 8
    ngram: int = 2
    first_value: float = 0.75  # the lookup's measured precision on its first token (0.68-0.81)
    next_value: float = 0.9  # how much likelier each further token is accepted, once its parent was
    window: int = 4096  # tokens of context searched, newest first

    def __post_init__(self) -> None:
        for name in ("depth", "ngram", "window"):
            if getattr(self, name) < 1:
                raise ValueError(f"ContextLookup.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("first_value", "next_value"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"ContextLookup.{name} must be in (0, 1], got {getattr(self, name)}")

    def propose(self, context: Sequence[int]) -> list[int]:
        """The up to ``depth`` tokens that followed the latest earlier occurrence of the
        context's last ``ngram`` tokens (the root is the context's last token); ``[]``
        when they never occurred before."""
        tokens = np.asarray(context[-self.window :], dtype=np.int64)
        n = self.ngram
        if len(tokens) <= n:
            return []
        # starts[j]: the n tokens at j.. equal the last n, for every j that leaves a token after them
        starts = np.ones(len(tokens) - n, dtype=bool)
        for i in range(n):
            starts &= tokens[i : len(tokens) - n + i] == tokens[len(tokens) - n + i]
        found = np.flatnonzero(starts)
        if not len(found):
            return []
        follows = found[-1] + n
        return tokens[follows : follows + self.depth].tolist()

    def values(self, count: int) -> np.ndarray:
        """The values of a branch's first ``count`` proposed nodes, decreasing."""
        return self.first_value * self.next_value ** np.arange(count)


def graft_proposals(tree: DraftTree, proposals: Sequence[Sequence[int]], values: np.ndarray) -> None:
    """Add each sequence's proposed tokens to its tree as one path from the root.

    Where the tree already holds a prefix of the path (the head drafted those tokens
    too), that prefix is reused and each node on it takes the larger of its own value and
    the proposal's; the rest hangs under the last reused node, valued ``values[i]`` for
    the path's ``i``-th token.  A child never outvalues its parent (values decrease along
    the path), so every prefix of the tree's ranking stays a subtree.  The tree is
    rectangular: a sequence with fewer new tokens than the batch's longest gets value-0
    fillers under its root (ranked last)."""
    hangs = []  # per sequence: (the node its new tokens hang under, the path index of the first, the new tokens)
    for b, proposal in enumerate(proposals):
        node, reused = 0, 0
        for token in proposal:
            children = np.flatnonzero((tree.parents[b] == node) & (tree.tokens[b] == token))
            if not len(children):
                break
            node = int(children[0])
            tree.raise_value(b, node, values[reused])
            reused += 1
        hangs.append((node, reused, list(proposal[reused:])))
    roots = tree.tokens[:, 0]
    for i in range(max((len(new) for _, _, new in hangs), default=0)):
        rows = [(parent, new[i], values[first + i]) if i < len(new) else (0, int(roots[b]), 0.0)
                for b, (parent, first, new) in enumerate(hangs)]
        parents, tokens, layer_values = (np.array(column)[:, None] for column in zip(*rows))  # [B, 1] each
        layer = tree.add_layer(tokens, parents, layer_values)
        hangs = [(layer.start, first, new) for _, first, new in hangs]  # the next token hangs under this one
