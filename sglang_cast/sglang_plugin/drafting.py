"""CAST's expansion stage in SGLang's static EAGLE layout (pure torch).

SGLang's EAGLE worker grows a tree with fixed shapes: every layer has exactly
``topk`` frontier rows per sequence, each row proposes its ``topk`` best children,
and the next frontier is the best ``topk`` of those ``topk²`` children.  CAST
keeps only ``n_i <= topk`` nodes of layer ``i`` (breadth pruning) and may stop
before the last layer (depth pruning).  Here the pruning is expressed as a *mask*
over the frontier values instead of a change of shape: a pruned row keeps its
slot and is still drafted, but its children get value -1, below every real
value, so they never make the next layer's best ``topk``.  Every tensor that
reaches SGLang keeps its shape.  Removing pruned rows from the next draft forward
would change its row count, which SGLang fixes per iteration: the multi-step
draft attention backend plans ``topk`` rows per request for every step, and the
draft KV slots are laid out ``[steps, B·topk]`` (``per_step_draft_out_cache_loc``);
SGLang's runtime states vary the step count and the verify width, not ``topk``.

The decisions themselves are the shared policy objects' (``IterationPlan.keep``
and ``IterationPlan.grow``), fed the same ``[B, N]`` candidate values the native
engine feeds them, so both engines make the same decisions on the same values.

SGLang's own drafting also numbers the nodes for its verify kernel; here the
verified subtree is numbered after the rerank instead (``verify_layout``), so the
tree may also hold nodes no draft forward proposed (the prompt-lookup branch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..cast import DraftTree, IterationPlan

# (frontier tokens [B·K], frontier row per sequence [B, K] or None for layer 1,
#  layer index i counting from 0) -> (children probs [B·K, K], children tokens [B·K, K]),
# children best first.  In the worker this is one draft-model forward.
StepFn = Callable[[torch.Tensor, torch.Tensor | None, int], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class DraftedTree:
    """What one masked expansion produced: ``tree`` holds every drafted child (the
    rerank pool the policy reasons about), on the host; ``depth`` layers were drafted
    with ``topk`` frontier rows each.  A prompt-lookup branch grafted afterwards
    (``cast.graft_proposals``) adds nodes, and may add layers, to ``tree``."""

    tree: DraftTree
    depth: int
    topk: int

    @property
    def grafted(self) -> bool:
        """Whether ``tree`` holds layers beyond the drafted ones (a grafted branch)."""
        return self.tree.layers > self.depth


def _first(count: int, width: int, device: torch.device) -> torch.Tensor:
    """``[width]`` bool: True for the first ``count`` slots."""
    return torch.arange(width, device=device) < count


def _to_host(values: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor):
    """One deeper layer's ranked children (``_next_layer``: ``[B, K·K]`` each, the
    first ``K`` its frontier) on the host in a single device-to-host copy (one sync
    per layer instead of one per tensor): float64 values, then parent rows and
    tokens, exact as float64 below 2^53."""
    host = torch.stack([values, rows.double(), tokens.double()]).cpu()
    return host[0], host[1].long(), host[2].long()


@dataclass(frozen=True)
class HostRoots:
    """The root's candidates on the host.  The depth choice needs their values
    before the draft batch is prepared, and they are layer 1 of the tree, so one
    copy serves both (``roots_to_host``)."""

    values: torch.Tensor  # [B, K] float64: the root's best children's draft probabilities
    tokens: torch.Tensor  # [B, K] long: those children's tokens
    bonus: torch.Tensor  # [B] long: the roots themselves

    def layer_one(self, width: int):
        """Layer 1 as ``_to_host`` would give it: values (columns past ``width`` at -1),
        parent rows (all the root's) and tokens."""
        batch, topk = self.values.shape
        values = torch.where(_first(width, topk, self.values.device), self.values, -1.0)
        return values, torch.zeros((batch, topk), dtype=torch.long), self.tokens


def roots_to_host(root_probs: torch.Tensor, root_tokens: torch.Tensor, bonus_tokens: torch.Tensor) -> HostRoots:
    """``root_probs``/``root_tokens`` ``[B, K]`` and ``bonus_tokens`` ``[B]`` on the host
    in one device-to-host copy (float64 carries the token ids exactly)."""
    topk = root_probs.shape[1]
    host = torch.cat([root_probs.double(), root_tokens.double(), bonus_tokens.double().unsqueeze(1)], dim=1).cpu()
    return HostRoots(values=host[:, :topk], tokens=host[:, topk:2 * topk].long(), bonus=host[:, 2 * topk].long())


def _next_layer(values: torch.Tensor, kept: int, columns: torch.Tensor, child_probs: torch.Tensor,
                child_tokens: torch.Tensor):
    """The next layer's ranked children on the device, from a layer's frontier
    ``values`` ``[B, K]`` and its draft forward (``[B·K, K]`` each).

    Children of pruned rows (``kept`` and past) and columns past top_k get -1,
    below every real value (>= 0).  A stable descending sort of the row-major order
    ranks them exactly as the native engine's ``ranked_children``: the first
    ``kept · top_k`` are the drafted children, the first K the candidates.  Returns
    values, parent rows and tokens, each ``[B, K·K]``."""
    batch, topk = values.shape[0], columns.shape[0]
    live = _first(kept, topk, values.device).view(1, topk, 1) & columns.view(1, 1, topk)
    children = torch.where(live, values[:, :topk].unsqueeze(2) * child_probs.view(batch, topk, topk).double(), -1.0)
    ranked, order = torch.sort(children.flatten(1), dim=1, descending=True, stable=True)
    tokens = child_tokens.reshape(batch, topk * topk).gather(1, order).long()
    return ranked, order // topk, tokens


def draft_masked_tree(plan: IterationPlan, root_probs: torch.Tensor, root_tokens: torch.Tensor, roots: HostRoots,
                      step: StepFn, max_steps: int, expected_depth: int) -> DraftedTree:
    """Grow one tree per sequence under ``plan`` with SGLang's static shapes.

    ``root_probs``/``root_tokens`` ``[B, K]`` are the root's best children (from the
    previous draft-extend), on the model's device; ``roots`` the same numbers and
    the roots themselves on the host (``roots_to_host``).  ``K`` is
    the worker's ``topk``; a profile bucket may ask for fewer candidates
    (``plan.top_k <= K``): the columns and candidates past it are masked too.  At
    most ``min(plan.max_depth, max_steps)`` layers are drafted.

    The drafting tensors stay on the model's device.  Layer 1 is decided on
    ``roots``; every deeper layer's ranked children are copied to the host in one
    transfer (``4·B·K²`` numbers), where the policy decides: a ``d``-layer draft costs
    ``d - 1`` copies here, plus the one of ``roots``.  Each copy waits for the
    device, which then idles until the host launches more work, so right after a
    copy the host launches the layer's draft forward: its input rows are the
    layer's frontier, fixed by the previous layer's decision, whatever this
    layer's ``keep`` says (pruned rows are masked, not removed).  The decisions and
    the tree's bookkeeping (``DraftTree.add_layer``) then run while the device
    drafts.  Only ``grow`` can make that forward unnecessary, so it is launched
    early only below ``expected_depth`` (the plan's ``predict_depth``); a deeper
    layer is forwarded after ``grow`` says so.  A prediction deeper than the draft
    costs one unused forward; the tree and the decisions never depend on it.
    """
    batch, topk = root_probs.shape
    if plan.top_k > topk:
        raise ValueError(f"the profile asks for top_k={plan.top_k} but SGLang was launched with "
                         f"--speculative-eagle-topk {topk}")
    width = plan.top_k
    columns = _first(width, topk, root_probs.device)
    depth_limit = min(plan.max_depth, max_steps)
    tree = DraftTree.from_roots(roots.bonus)

    # Layer 1: the root's children, all children of node 0.
    values = torch.where(columns, root_probs.double(), -1.0)
    tokens, rows = root_tokens.long(), None
    host = roots.layer_one(width)
    drafted = width  # children drafted in this layer: all of them join the rerank pool, best first
    layer, layer_ids = 1, range(0, 1)  # the previous layer's node ids: the root's, for layer 1

    def forward_frontier():
        """The draft forward of layer ``layer``'s ``K`` frontier rows."""
        return step(tokens[:, :topk].reshape(-1), None if layer == 1 else rows[:, :topk], layer - 1)

    while True:
        early = layer < min(expected_depth, depth_limit)
        if early:
            children = forward_frontier()
        host_values, host_rows, host_tokens = host
        # The policy sees the same [B, top_k] candidate values the native engine does.
        kept = plan.keep(layer, host_values[:, :width])
        grows = plan.grow_within(layer, max_steps)
        if grows:
            if not early:
                children = forward_frontier()
            values, rows, tokens = _next_layer(values, kept, columns, *children)
        # Every drafted child joins the pool (the kept ones first: they are the best);
        # ``host_rows`` index the previous layer's nodes.
        parents = host_rows[:, :drafted] + layer_ids.start
        layer_ids = tree.add_layer(host_tokens[:, :drafted], parents, host_values[:, :drafted])
        if not grows:
            break
        drafted = kept * width
        layer += 1
        host = _to_host(values, rows, tokens)
    return DraftedTree(tree=tree, depth=layer, topk=topk)
