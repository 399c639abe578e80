"""Growing the draft tree with an EAGLE head: the engine's ``Expander``.

EAGLE drafts by feeding a node's token together with its parent's feature (the
target's hidden state for the root, the draft's own output below it) and reading
the children off the draft's LM head.  Each layer is one draft forward over the
frontier nodes; tree attention lets a node see the committed prefix and the draft
entries of its own ancestors only, so its distribution depends on its path alone
(what trace replay relies on).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..cast import DraftTree
from ..cast.tree import node_slice
from ..models import cpu_layer
from ..models.kv_cache import to_device

# One draft forward on the draft's cache: ``[B, n]`` tokens, ``[B, n, F]`` features,
# ``[B, n]`` positions, host slots ``[B]``, ``[B, n, s]`` tree mask -> (hidden, logits).
DraftStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                     tuple[torch.Tensor, torch.Tensor]]

# A draft layer's children on the host: (logits ``[B, n, V]``, top_k) -> their probabilities
# ``[B, n, top_k]`` (float64) and target token ids ``[B, n, top_k]``, best first.
ChildReader = Callable[[torch.Tensor, int], tuple[np.ndarray, np.ndarray]]


def on_host(children: torch.Tensor, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """``[B, n, 2 * top_k]`` float64 children (probabilities, then ids) as the host's two
    arrays, in one copy."""
    host = children.cpu().numpy()
    return host[..., :top_k], host[..., top_k:].astype(np.int64)


def torch_children(to_target: Callable[[torch.Tensor], torch.Tensor]) -> ChildReader:
    """The children read with torch ops on any device (``to_target`` maps the head's ids
    to the target's; float64 holds the ids exactly)."""
    def read(logits: torch.Tensor, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        top = torch.topk(torch.softmax(logits.float(), dim=-1), top_k, dim=-1, sorted=True)
        return on_host(torch.cat([top.values.double(), to_target(top.indices).double()], dim=-1), top_k)
    return read


def child_reader_for(draft, device: torch.device, dtype: torch.dtype) -> ChildReader:
    """How the engine reads a draft layer's children: one fused op for fp32 logits on a
    CPU that builds it (`cpu_layer`'s ``top_children``: the torch read's eight ops were
    each paid again after a forward had evicted the caches), else `torch_children`."""
    if device.type == "cpu" and dtype == torch.float32 and cpu_layer.unavailable_reason() is None:
        children = cpu_layer.step_op("top_children")
        offsets = cpu_layer.NO_OFFSETS if draft.target_offsets is None else draft.target_offsets
        return lambda logits, top_k: on_host(children(logits, top_k, offsets), top_k)
    return torch_children(draft.draft_to_target)


class DraftExpander:
    """Serves ``cast.grow_tree``: children of frontier nodes, best first.

    ``step`` runs one draft forward on the draft's cache (``(tokens, features,
    positions, slots, mask) -> DraftOutput``: the runner's, eager or a CUDA graph);
    ``read_children`` reads a layer's children off its logits (`child_reader_for`).
    ``slots`` ``[B]`` is a host tensor; ``context_lens`` ``[B]`` and the root outputs live
    on the device.

    The tree is on the host (cast/tree.py): each draft forward's inputs are read off it
    and sent to the device, and each layer's children come back in one copy.  A
    frontier node's feature is its parent's draft output, and every parent was in the
    frontier expanded just before: ``grow_tree`` expands the kept prefix of the newest
    layer, consecutive node ids.  So only that frontier's outputs are kept, ``[B,
    n_prev, h]`` on the device, and a parent's row is its id minus the frontier's
    first id; and every frontier node sits at the newest layer's depth
    (``tree.layers``), one position past its parent's.  The draft cache holds the
    nodes of every frontier expanded so far (``scratch``, their ids); a node attends to
    those of them that are its ancestors."""

    def __init__(self, step: DraftStep, read_children: ChildReader, slots: torch.Tensor,
                 context_lens: torch.Tensor, root_hidden: torch.Tensor, root_logits: torch.Tensor) -> None:
        self.step = step
        self.read_children = read_children
        self.slots = slots
        self.context_lens = context_lens
        self.device = root_logits.device
        self.root_logits = root_logits
        self.last_frontier = range(0, 1)  # the root
        self.last_hidden = root_hidden.unsqueeze(1)  # [B, n_prev, h], rows of ``last_frontier``
        self.scratch: list[int] = []

    def _send(self, host: np.ndarray) -> torch.Tensor:
        return to_device(torch.from_numpy(host), self.device)

    def expand(self, tree: DraftTree, frontier: range, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        if tree.size == 1:
            return self.read_children(self.root_logits.unsqueeze(1), top_k)
        nodes, n = node_slice(frontier), len(frontier)
        width = self.last_hidden.shape[-1]
        parent_rows = self._send(tree.parents[:, nodes] - self.last_frontier.start)  # [B, n] rows of ``last_hidden``
        features = self.last_hidden.gather(1, parent_rows.unsqueeze(-1).expand(-1, -1, width))
        positions = (self.context_lens.view(-1, 1) + (tree.layers - 1)).expand(-1, n)  # the newest layer's depth
        self.scratch.extend(frontier)
        mask = tree.ancestors[:, nodes].take(self.scratch, axis=2)  # [B, n, scratch]
        # ``hidden`` may be a view of a graph's output: read (gathered) before the next replay.
        hidden, logits = self.step(self._send(tree.tokens[:, nodes]), features, positions, self.slots, self._send(mask))
        self.last_frontier, self.last_hidden = frontier, hidden
        return self.read_children(logits, top_k)
