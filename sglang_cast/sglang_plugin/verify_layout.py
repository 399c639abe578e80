"""From a masked draft to SGLang's verify inputs, and the choice of verify width.

The policy's rerank (``plan.verify_count``) says how many nodes are worth
verifying; SGLang verifies a fixed number of tokens per request, the width of
the runtime state in use (its target CUDA graphs were captured for it).  The
worker therefore verifies the smallest pre-built width that holds the policy's
nodes, and fills it with the next nodes of the same ranking: the target forward
costs the width anyway, and any prefix of the ranking is a valid subtree, so the
extra nodes can only add accepted tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..cast import VerifyTree, select_verified
from .drafting import DraftedTree


def verify_widths(max_width: int, bucket_widths: Sequence[int]) -> tuple[int, ...]:
    """Widths (tokens verified per request, root included) to pre-build runtime
    states for: powers of two below ``max_width``, every profile bucket's own
    ``num_verify_tokens`` and ``max_width`` itself.  Few enough to capture, dense
    enough that a width is never more than twice what the policy asked for."""
    if max_width < 2:
        raise ValueError(f"the verify width counts the root and must be >= 2, got {max_width}")
    widths = {max_width} | {w for w in bucket_widths if 2 <= w <= max_width}
    power = 2
    while power < max_width:
        widths.add(power)
        power *= 2
    return tuple(sorted(widths))


def choose_width(wanted_nodes: int, available_nodes: int, widths: Sequence[int]) -> int:
    """The pre-built width for verifying ``wanted_nodes`` draft nodes of a tree that
    has ``available_nodes``: the smallest width holding them all, else the largest
    the tree can fill (then the best ``width - 1`` nodes are verified)."""
    fitting = [w for w in sorted(widths) if w - 1 <= available_nodes]
    if not fitting:
        raise ValueError(f"no pre-built verify width fits a tree of {available_nodes} draft nodes "
                         f"(widths {sorted(widths)})")
    return next((w for w in fitting if w - 1 >= wanted_nodes), fitting[-1])


@dataclass(frozen=True)
class VerifyLayout:
    """SGLang's inputs to ``build_tree_kernel_efficient`` for one iteration, and
    the same tree as this project sees it.

    ``top_scores_index`` lists the verified nodes' flat ids in rank order (best
    first), so parents precede children and siblings are tried best first by
    SGLang's verify, as CAST.md §6 asks.
    """

    parent_list: torch.Tensor  # [B, 1 + topk·(depth-1)]
    top_scores_index: torch.Tensor  # [B, width - 1]
    draft_tokens: torch.Tensor  # [B, width - 1]
    verified: VerifyTree  # root + the same nodes, local parents

    @property
    def width(self) -> int:
        return self.verified.num_tokens


def verify_layout(drafted: DraftedTree, width: int) -> VerifyLayout:
    """Verify the best ``width - 1`` kept nodes of every sequence."""
    verified = select_verified(drafted.tree, width - 1)
    return VerifyLayout(
        parent_list=drafted.parent_list(),
        top_scores_index=drafted.flat_ids.gather(1, verified.node_ids[:, 1:]),
        draft_tokens=verified.tokens[:, 1:],
        verified=verified,
    )
