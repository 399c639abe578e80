"""From a CAST tree to SGLang's verify inputs.

The policy's rerank (``plan.verify_count``) says how many nodes are worth
verifying; SGLang verifies a fixed number of tokens per request, the width of
the runtime state in use (``runtime_shapes.choose_width``).  The worker fills
that width with the next nodes of the same ranking: the target forward costs
the width anyway, and any prefix of the ranking is a valid subtree, so the
extra nodes can only add accepted tokens.

SGLang's tree kernel (``build_tree_kernel_efficient``) knows a verified node by a
flat id ``f`` alone: its parent is the node whose flat id is
``parent_list[f // topk]``, the root where ``f // topk`` is 0.  Nothing else reads
the ids (verify takes ``draft_tokens`` as given, and the draft's tree KV is dropped
after verify), so the layout numbers the verified subtree itself, whoever proposed
its nodes (the head's layers or the prompt-lookup branch): the root's children take
ids ``0..topk-1``; every other verified node with verified children gets a block
``q >= 1`` of its own, its children take ids ``q·topk + j`` and ``parent_list[q]``
holds its flat id.  Blocks go out in rank order, so ids grow along every path.

The kernel's row width is fixed by the *runtime state's* depth,
``topk·(depth-1) + 1`` (its CUDA build refuses any other, ``tree.cuh``:
``depth == 1 || parent_width == topk*(depth-1)+1``), and its ancestor walk stops
after ``depth`` steps.  So a verified set must keep to three limits: at most ``topk``
verified children per node, at most ``topk·(depth-1)`` parents besides the root, no
node deeper than ``depth``.  A tree the head drafted in the state keeps to them (layer
``i``'s at most ``topk`` frontier rows are its only parents); a grafted branch may
not, so then the ranking is walked and a node that would break one is skipped, with
its subtree (``verifiable_ranking``).  Unused ``parent_list`` entries are -1 and never
read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..cast import VerifyTree, verified_subtree
from .drafting import DraftedTree


@dataclass(frozen=True)
class VerifyLayout:
    """SGLang's inputs to ``build_tree_kernel_efficient`` for one iteration, and
    the same tree as this project sees it.

    ``top_scores_index`` lists the verified nodes' flat ids in rank order (best
    first), so parents precede children and siblings are tried best first by
    SGLang's verify, as docs/design/cast.md §6 asks.
    """

    parent_list: torch.Tensor  # [B, 1 + topk·(state depth - 1)], -1 where unused
    top_scores_index: torch.Tensor  # [B, width - 1]
    draft_tokens: torch.Tensor  # [B, width - 1]
    verified: VerifyTree  # root + the same nodes, local parents

    @property
    def width(self) -> int:
        return self.verified.num_tokens


def verifiable_ranking(drafted: DraftedTree, state_depth: int, limit: int) -> np.ndarray:
    """Each sequence's best nodes, up to ``limit``, that a depth-``state_depth`` state
    verifies together (``[B, n]``, best first; ``n`` the fewest any sequence has).

    Without a grafted branch that is the ranking itself; with one, the ranking is
    walked and a node that would break one of the kernel's limits is left out, with
    its subtree."""
    if drafted.depth > state_depth:
        raise ValueError(f"a {drafted.depth}-layer draft cannot be verified in a depth-{state_depth} runtime state")
    ranked = drafted.tree.ranked_nodes()
    if not drafted.grafted:
        return ranked[:, :limit]
    tree, topk = drafted.tree, drafted.topk
    rows = [_fitting(ranked[b], tree.parents[b], tree.depths[b], topk, state_depth, limit)
            for b in range(tree.batch_size)]
    count = min(len(row) for row in rows)
    return np.array([row[:count] for row in rows], dtype=np.int64).reshape(tree.batch_size, count)


def _fitting(ranked: np.ndarray, parents: np.ndarray, depths: np.ndarray, topk: int, state_depth: int,
             limit: int) -> list[int]:
    """One sequence's ranked nodes that keep to the kernel's limits, up to ``limit``."""
    chosen: list[int] = []
    children = {0: 0}  # chosen node -> its chosen children
    free_parents = topk * (state_depth - 1)  # blocks left for non-root parents
    for node in ranked.tolist():
        if len(chosen) == limit:
            break
        parent = int(parents[node])
        if parent not in children or children[parent] == topk or depths[node] > state_depth:
            continue  # its parent was left out, has a full block, or it is too deep
        if parent != 0 and children[parent] == 0:
            if free_parents == 0:
                continue
            free_parents -= 1
        children[parent] += 1
        children[node] = 0
        chosen.append(node)
    return chosen


def verify_layout(drafted: DraftedTree, width: int, state_depth: int,
                  ranking: np.ndarray | None = None) -> VerifyLayout:
    """Verify the first ``width - 1`` nodes of ``ranking`` (``verifiable_ranking``,
    computed here when not given) of every sequence in the runtime state of depth
    ``state_depth``."""
    if ranking is None:
        ranking = verifiable_ranking(drafted, state_depth, width - 1)
    if ranking.shape[1] < width - 1:
        raise ValueError(f"a width-{width} verify needs {width - 1} nodes per sequence, the ranking has "
                         f"{ranking.shape[1]}")
    verified = verified_subtree(drafted.tree, ranking[:, : width - 1])
    if int(verified.depths.max()) > state_depth:
        raise ValueError(f"a verified node {int(verified.depths.max())} deep does not fit a depth-{state_depth} "
                         "runtime state (see verifiable_ranking)")
    parent_list, flat_ids = flat_numbering(verified.parents.numpy(), drafted.topk, state_depth)
    return VerifyLayout(parent_list=torch.from_numpy(parent_list), top_scores_index=torch.from_numpy(flat_ids),
                        draft_tokens=verified.tokens[:, 1:], verified=verified)


def flat_numbering(parents: np.ndarray, topk: int, state_depth: int) -> tuple[np.ndarray, np.ndarray]:
    """SGLang's ``parent_list`` ``[B, 1 + topk·(state_depth-1)]`` and the flat ids
    ``[B, n - 1]`` of a verified subtree given by local ``parents`` ``[B, n]`` (root
    first, -1; each parent before its child): non-root parents take blocks 1, 2, ...
    in their own order, and a node's id is its parent's block times ``topk`` plus
    how many of its siblings come before it."""
    batch, count = parents.shape
    rows = np.arange(batch)[:, None]
    nodes = parents[:, 1:]  # [B, n-1] each non-root node's parent
    has_child = np.zeros((batch, count), dtype=bool)
    has_child[rows, nodes] = True
    has_child[:, 0] = False  # the root's block is 0
    block = np.cumsum(has_child, axis=1) * has_child  # [B, n]: a parent's block, 0 for the root and leaves
    earlier = np.tril(np.ones((count - 1, count - 1), dtype=bool), k=-1)  # [i, j]: j before i
    siblings_before = ((nodes[:, :, None] == nodes[:, None, :]) & earlier).sum(axis=2)  # [B, n-1]
    width = 1 + topk * (state_depth - 1)
    if block.max(initial=0) >= width or siblings_before.max(initial=0) >= topk:
        raise ValueError(f"the verified subtree needs more than {topk} children per node or {width - 1} parents: "
                         f"it does not fit a depth-{state_depth} state of topk {topk} (see verifiable_ranking)")
    flat = np.concatenate([np.full((batch, 1), -1), block[rows, nodes] * topk + siblings_before], axis=1)  # [B, n]
    parent_list = np.full((batch, width), -1, dtype=np.int64)
    b, node = np.nonzero(has_child)
    parent_list[b, block[b, node]] = flat[b, node]
    return parent_list, np.ascontiguousarray(flat[:, 1:])  # the CUDA kernel checks its strides
