"""Lossless verification of a verified tree against the target (docs/design/cast.md §6).

Both functions return, per sequence, the accepted path (local indices into the
``VerifyTree``, root excluded) and the bonus token drawn from the target at the
last accepted node, so an engine commits ``accepted + 1`` tokens per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import RequestSampler, target_probs
from .tree import VerifyTree


def committed_tokens(num_accepted: list[int]) -> int:
    """Tokens an iteration commits, given the draft tokens accepted per sequence:
    those plus one bonus token per sequence (τ is this over the sequences)."""
    return sum(num_accepted) + len(num_accepted)


@dataclass
class VerifyResult:
    """What verification decided, per sequence, on the host: the accepted path (local
    node indices of the ``VerifyTree``, root excluded, in depth order) and the bonus
    token drawn from the target after it."""

    paths: list[list[int]]
    bonus: list[int]

    @property
    def num_accepted(self) -> list[int]:
        """Draft tokens accepted per sequence (the bonus excluded)."""
        return [len(path) for path in self.paths]

    def committed(self, tree: VerifyTree) -> list[list[int]]:
        """Per sequence, the tokens it commits: its accepted draft tokens of ``tree``
        in depth order, then the bonus token (one host read of the tree's tokens)."""
        rows = tree.tokens.tolist()
        return [[tokens[i] for i in path] + [bonus] for tokens, path, bonus in zip(rows, self.paths, self.bonus)]


def verify_greedy(tree: VerifyTree, target_argmax) -> VerifyResult:
    """The longest verified path whose every token is the target's argmax after its
    parent (``target_argmax[b, i]``: the target's greedy next token after node ``i``,
    ``[B, n]`` on the host: an engine's one read of its verification).

    One pass over each sequence's nodes in local order: parents come before their
    children, so the walk meets the path's next node after the node it stands on, and
    siblings carry distinct tokens (a top-k's), so at most one child matches.  A
    handful of Python per node, where the same rule as tensor ops was ~20 ops (on a GPU,
    launches) whatever the tree's size."""
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    paths, bonus = [], []
    for row_tokens, row_parents, row_argmax in zip(tokens, parents, target_argmax.tolist(), strict=True):
        path, node = [], 0
        for i in range(1, len(row_tokens)):
            if row_parents[i] == node and row_tokens[i] == row_argmax[node]:
                path.append(i)
                node = i
        paths.append(path)
        bonus.append(row_argmax[node])
    return VerifyResult(paths, bonus)


def verify_sampling(tree: VerifyTree, target_logits: torch.Tensor, samplers: list[RequestSampler],
                    positions: list[int]) -> VerifyResult:
    """Speculative sampling with deterministic (point-mass) proposals: at each node on
    the path, the token at its output position is drawn from the target's distribution
    there (after the request's temperature, top-k, top-p); the verified child carrying
    it is accepted and the walk descends, else the drawn token is the bonus.

    ``positions[b]``: the output position of the token after row ``b``'s root (the
    tokens it has generated so far).  A child is accepted with probability ``p(t)``,
    which is what trying the children in turn with residuals gives, and every emitted
    token is the target's own draw at its position: distributed exactly as plain
    sampling and, with a seed, the same tokens as plain sampling draws."""
    parents, tokens = tree.parents.tolist(), tree.tokens.tolist()
    paths: list[list[int]] = []
    bonus: list[int] = []
    for b, sampler in enumerate(samplers):
        path: list[int] = []
        node = 0
        while True:
            probs = target_probs(target_logits[b, node], sampler.params)
            token = sampler.draw(probs, positions[b] + len(path))
            child = next((i for i, (parent, t) in enumerate(zip(parents[b], tokens[b]))
                          if parent == node and t == token), None)
            if child is None:
                bonus.append(token)
                break
            path.append(child)
            node = child
        paths.append(path)
    return VerifyResult(paths, bonus)
