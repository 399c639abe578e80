"""From a masked draft to SGLang's verify inputs.

The policy's rerank (``plan.verify_count``) says how many nodes are worth
verifying; SGLang verifies a fixed number of tokens per request, the width of
the runtime state in use (``runtime_shapes.choose_width``).  The worker fills
that width with the next nodes of the same ranking: the target forward costs
the width anyway, and any prefix of the ranking is a valid subtree, so the
extra nodes can only add accepted tokens.

SGLang's tree kernel reads ``parent_list`` with the row stride of the *runtime
state's* depth (``topk·(depth-1) + 1``) and its CUDA build refuses any other
width (``tree.cuh``, host check ``depth == 1 || parent_width == topk*(depth-1)+1``).
The draft often stops before the state's depth (a predicted depth rounded up to
a pre-built one, the exact depth rule, a reloaded profile), so the layout pads
``parent_list`` to the state's width.  The padding is never read: the kernel
reads ``parent_list[flat // topk]`` only for verified nodes, and every verified
node lies in a drafted layer.
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

    parent_list: torch.Tensor  # [B, 1 + topk·(state depth - 1)], -1 past the drafted layers
    top_scores_index: torch.Tensor  # [B, width - 1]
    draft_tokens: torch.Tensor  # [B, width - 1]
    verified: VerifyTree  # root + the same nodes, local parents

    @property
    def width(self) -> int:
        return self.verified.num_tokens


def verify_layout(drafted: DraftedTree, width: int, state_depth: int) -> VerifyLayout:
    """Verify the best ``width - 1`` kept nodes of every sequence in the runtime
    state of depth ``state_depth`` (at least the depth drafted)."""
    if drafted.depth > state_depth:
        raise ValueError(f"a {drafted.depth}-layer draft cannot be verified in a depth-{state_depth} runtime state")
    verified = select_verified(drafted.tree, width - 1)
    return VerifyLayout(
        parent_list=padded_parent_list(drafted, state_depth),
        top_scores_index=drafted.flat_ids.gather(1, verified.node_ids[:, 1:]),
        draft_tokens=verified.tokens[:, 1:],
        verified=verified,
    )


def padded_parent_list(drafted: DraftedTree, state_depth: int) -> torch.Tensor:
    """``drafted.parent_list()`` padded with -1 to ``[B, 1 + topk·(state_depth-1)]``."""
    parents = drafted.parent_list()
    missing = drafted.topk * (state_depth - 1) + 1 - parents.shape[1]
    return torch.nn.functional.pad(parents, (0, missing), value=-1)
