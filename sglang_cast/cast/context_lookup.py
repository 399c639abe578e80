"""A draft branch no model drafts: what followed the last tokens where they occurred
before in the same context (prompt lookup).

Answers often continue a span of their prompt (a restated signature and docstring, a
quoted name, an extracted field), and there the EAGLE head is weakest: on the shipped
head's answers it scores 0.44–0.49 where the answer copies its prompt against 0.76 on its
own training kind (docs/results/2026-11-29_passages_and_lookup_amx.md). Grafted onto the
head's tree, the lookup's tokens compete in the same rerank: each proposed node is valued
like a drafted one (an estimate that it is accepted), so the policy verifies it only
where it is worth its cost. Verification needs nothing new: greedy and sampled
verification accept any verified child that carries the target's token.

How much a proposal is worth depends on how long a suffix of the context it matched: on
the target's own answers its first token is right 54 % of the times after a 2-token match
and 93 % after 8 or more (docs/results/2026-11-30_lookup_values.md). So the lookup takes
the longest match (up to ``max_ngram`` tokens, the latest such occurrence) and values its
tokens by that length's measured rates (`MATCH_VALUES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tree import DraftTree


@dataclass(frozen=True)
class MatchValue:
    """The value of the tokens of a proposal that matched at least ``matched`` context
    tokens: the first token is accepted with rate ``first``, each further one with rate
    ``next`` once its parent was, so the ``i``-th (from 1) is worth ``first * next**(i-1)``."""

    matched: int
    first: float
    next: float


# Measured on the target's greedy answers to 586 training-kind prompts (85k answer tokens,
# no benchmark), at every answer position where the lookup proposes; held-out answer sets
# agree within 0.1 (docs/results/2026-11-30_lookup_values.md, `lookup_values.py`).
MATCH_VALUES = (MatchValue(2, 0.540, 0.735), MatchValue(3, 0.649, 0.782), MatchValue(4, 0.763, 0.840),
                MatchValue(8, 0.932, 0.953))
# Traces recorded before proposals carried their match length were proposed after a
# match of exactly this many tokens (the lookup's only rule then).
LEGACY_MATCH = 2


@dataclass(frozen=True)
class Proposal:
    """One sequence's proposed tokens and how many context tokens the lookup matched to
    find them (0 with no tokens)."""

    tokens: list[int]
    matched: int

    @classmethod
    def none(cls) -> Proposal:
        return cls([], 0)


@dataclass(frozen=True)
class ContextLookup:
    """Up to ``depth`` tokens proposed per sequence after the latest earlier occurrence of
    the longest suffix of its context, from ``max_ngram`` down to ``ngram`` tokens, that
    occurred before; valued by ``match_values`` (the entry of the longest ``matched`` the
    match reaches; below the first entry, the first)."""

    depth: int = 8
    ngram: int = 2
    max_ngram: int = 8
    window: int = 4096  # tokens of context searched, newest first
    match_values: tuple[MatchValue, ...] = MATCH_VALUES

    def __post_init__(self) -> None:
        for name in ("depth", "ngram", "window"):
            if getattr(self, name) < 1:
                raise ValueError(f"ContextLookup.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_ngram < self.ngram:
            raise ValueError(f"ContextLookup.max_ngram must be >= ngram ({self.ngram}), got {self.max_ngram}")
        if not self.match_values:
            raise ValueError("ContextLookup.match_values must hold at least one MatchValue")
        for entry in self.match_values:
            for name in ("first", "next"):
                if not 0 < getattr(entry, name) <= 1:
                    raise ValueError(f"ContextLookup.match_values: {name} must be in (0, 1], got "
                                     f"{getattr(entry, name)} for matched={entry.matched}")

    def propose(self, context: Sequence[int]) -> Proposal:
        """The up to ``depth`` tokens that followed the latest earlier occurrence of the
        longest suffix of ``context`` (``ngram`` to ``max_ngram`` tokens; the root is the
        context's last token) that occurred before; `Proposal.none` when none did."""
        tokens = np.asarray(context[-self.window :], dtype=np.int64)
        last = len(tokens) - 1
        # ends[j]: an earlier occurrence of the suffix so far ends at j (j < last leaves a token after it)
        ends = np.flatnonzero(tokens[:last] == tokens[last]) if last > 0 else np.empty(0, dtype=np.int64)
        found, matched = None, 0
        for n in range(1, self.max_ngram + 1):
            if n > 1:
                ends = ends[ends >= n - 1]  # room for n tokens; then last - (n - 1) > ends >= 0 too
                if len(ends):
                    ends = ends[tokens[ends - (n - 1)] == tokens[last - (n - 1)]]
            if not len(ends):
                break
            if n >= self.ngram:
                found, matched = int(ends[-1]), n
        if found is None:
            return Proposal.none()
        return Proposal(tokens[found + 1 : found + 1 + self.depth].tolist(), matched)

    def values(self, proposal: Proposal, count: int) -> np.ndarray:
        """The values of ``proposal``'s first ``count`` nodes, decreasing."""
        entry = self.match_values[0]
        for candidate in self.match_values:
            if candidate.matched <= proposal.matched:
                entry = candidate
        return entry.first * entry.next ** np.arange(count)


def graft_proposals(tree: DraftTree, proposals: Sequence[Proposal], lookup: ContextLookup) -> None:
    """Add each sequence's proposal, up to ``lookup.depth`` tokens, to its tree as one path
    from the root, priced by ``lookup.values`` (the live engine and trace replay both graft
    through here, so both price a proposal alike).

    Where the tree already holds a prefix of the path (the head drafted those tokens
    too), that prefix is reused and each node on it takes the larger of its own value and
    the proposal's; the rest hangs under the last reused node, valued ``values[b][i]`` for
    sequence ``b``'s ``i``-th token.  A child never outvalues its parent (values decrease
    along the path), so every prefix of the tree's ranking stays a subtree.  The tree is
    rectangular: a sequence with fewer new tokens than the batch's longest gets value-0
    fillers under its root (ranked last)."""
    paths = [p.tokens[: lookup.depth] for p in proposals]
    values = [lookup.values(p, len(path)) for p, path in zip(proposals, paths)]
    hangs = []  # per sequence: (the node its new tokens hang under, the path index of the first, the new tokens)
    for b, proposal in enumerate(paths):
        node, reused = 0, 0
        for token in proposal:
            children = np.flatnonzero((tree.parents[b] == node) & (tree.tokens[b] == token))
            if not len(children):
                break
            node = int(children[0])
            tree.raise_value(b, node, values[b][reused])
            reused += 1
        hangs.append((node, reused, list(proposal[reused:])))
    roots = tree.tokens[:, 0]
    for i in range(max((len(new) for _, _, new in hangs), default=0)):
        rows = [(parent, new[i], values[b][first + i]) if i < len(new) else (0, int(roots[b]), 0.0)
                for b, (parent, first, new) in enumerate(hangs)]
        parents, tokens, layer_values = (np.array(column)[:, None] for column in zip(*rows))  # [B, 1] each
        layer = tree.add_layer(tokens, parents, layer_values)
        hangs = [(layer.start, first, new) for _, first, new in hangs]  # the next token hangs under this one
