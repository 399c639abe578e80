"""From a masked draft to SGLang's verify inputs.

The policy's rerank (``plan.verify_count``) says how many nodes are worth
verifying; SGLang verifies a fixed number of tokens per request, the width of
the runtime state in use (``runtime_shapes.choose_width``).  The worker fills
that width with the next nodes of the same ranking: the target forward costs
the width anyway, and any prefix of the ranking is a valid subtree, so the
extra nodes can only add accepted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cast import VerifyTree, select_verified
from .drafting import DraftedTree


@dataclass(frozen=True)
class VerifyLayout:
    """SGLang's inputs to ``build_tree_kernel_efficient`` for one iteration, and
    the same tree as this project sees it.

    ``top_scores_index`` lists the verified nodes' flat ids in rank order (best
    first), so parents precede children and siblings are tried best first by
    SGLang's verify, as docs/design/cast.md §6 asks.
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
