"""Draft-tree bookkeeping for a batch (docs/design/cast.md §4–§5).

Every sequence in a batch grows the same number of nodes per layer (one ``n_i`` for
the batch keeps tensors rectangular), so a batch of trees is a handful of
``[B, T]`` tensors.  Node 0 of every sequence is the root: the last committed
token, value 1, depth 0.  Nodes are appended layer by layer, so node ids are in
creation order and depth never decreases with id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def node_slice(ids: range) -> slice:
    """Consecutive node ids as the slice that reads them from a ``[B, T, ...]`` field:
    a view, no gather (and no kernel launch on a GPU)."""
    return slice(ids.start, ids.stop)


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the host for a policy decision: one device-to-host copy, or the
    tensor itself when it is already there (the one crossing point, cast/expand.py)."""
    return tensor.cpu()


@dataclass
class DraftTree:
    """A batch of draft trees: ``tokens``, ``parents`` (-1 for the root), ``values``
    (product of draft probabilities along the path) and ``depths``, all ``[B, T]``."""

    tokens: torch.Tensor
    parents: torch.Tensor
    values: torch.Tensor
    depths: torch.Tensor
    # [B, T, T] ancestor-or-self matrix, kept up to date layer by layer so that tree
    # attention masks never need a walk over the nodes in the hot path.
    ancestors: torch.Tensor | None = None
    # False for `host_copy`'s trees: they answer policy decisions (values, ranks) only,
    # so they carry no ancestor matrix and cannot grow.
    with_ancestors: bool = True
    # Layers added since the root, known on the host: a bound on every node's depth
    # that verification loops to without reading ``depths`` back from the device.
    # Derived from ``depths`` (a host read) when a tree is built from tensors.
    layers: int | None = None
    # Preallocated room the fields above are views of (`TreeStorage`), so a new layer
    # is written in place: a handful of copies instead of re-concatenating every field
    # and the whole ancestor matrix per layer (on a GPU each op is a launch).
    storage: TreeStorage | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.ancestors is None and self.with_ancestors:
            self.ancestors = ancestor_mask(self.parents)
        if self.layers is None:
            self.layers = int(self.depths.max())

    @classmethod
    def from_roots(cls, root_tokens: torch.Tensor, capacity: int = 1, room: TreeStorage | None = None) -> DraftTree:
        """Trees of the roots alone, with room for ``capacity`` nodes per sequence
        (root included; more is allocated when a layer needs it).  ``room``, an earlier
        tree's storage, is written over when it fits (that tree is given up): an engine
        drafts a tree of the same batch and size every iteration."""
        batch, device = root_tokens.shape[0], root_tokens.device
        if capacity <= 1:  # plain decoding's tree: no room to prepare
            return cls(tokens=root_tokens.view(batch, 1).long(),
                       parents=torch.full((batch, 1), -1, dtype=torch.long, device=device),
                       values=torch.ones((batch, 1), dtype=torch.float64, device=device),
                       depths=torch.zeros((batch, 1), dtype=torch.long, device=device),
                       ancestors=torch.ones((batch, 1, 1), dtype=torch.bool, device=device), layers=0)
        if room is not None and room.fits(batch, capacity, device):
            room.clear()
        else:
            room = TreeStorage.allocate(batch, capacity, device)
        room.tokens[:, 0] = root_tokens.view(-1)
        return room.tree(1, layers=0)

    def host_copy(self) -> DraftTree:
        """This tree on the host for a policy decision: the policies compute on host
        float64 (their cost rows live there), so a device tree crosses once, in one
        packed copy (token ids and depths are exact in float64).  A tree already on
        the host is returned as is."""
        return self if self.values.device.type == "cpu" else self.copy_to_host()

    def copy_to_host(self) -> DraftTree:
        """`host_copy`'s device-to-host copy, made whatever the device."""
        packed = to_host(torch.stack([self.tokens.double(), self.parents.double(), self.values.double(),
                                      self.depths.double()]))
        tokens, parents, values, depths = packed.unbind(0)
        return DraftTree(tokens.long(), parents.long(), values, depths.long(), with_ancestors=False,
                         layers=self.layers)

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def size(self) -> int:
        """Nodes per sequence, root included."""
        return int(self.tokens.shape[1])

    def add_layer(self, tokens: torch.Tensor, parents: torch.Tensor, values: torch.Tensor) -> range:
        """Append one layer (``[B, n]`` each; ``parents`` are node ids) and return the
        new node ids, the same in every sequence (the tree is rectangular)."""
        first, n = self.size, tokens.shape[1]
        end = first + n
        depth = self.depths.gather(1, parents) + 1
        parent_rows = self.ancestors.gather(1, parents.unsqueeze(-1).expand(-1, -1, first))  # [B, n, first]
        storage = self.storage
        if storage is None or storage.capacity < end:
            storage = TreeStorage.holding(self, max(end, 2 * first))
        storage.tokens[:, first:end] = tokens
        storage.parents[:, first:end] = parents
        storage.values[:, first:end] = values
        storage.depths[:, first:end] = depth
        storage.ancestors[:, first:end, :first] = parent_rows  # the diagonal (self) is preset
        grown = storage.tree(end, self.layers + 1)
        self.tokens, self.parents, self.values, self.depths = grown.tokens, grown.parents, grown.values, grown.depths
        self.ancestors, self.layers, self.storage = grown.ancestors, grown.layers, storage
        return range(first, end)

    def ranked_nodes(self) -> torch.Tensor:
        """Non-root node ids per sequence, best first: value descending, ties by
        smaller depth, then creation order (docs/design/cast.md §5).  Because a child's value
        never exceeds its parent's and ids grow with depth, a stable sort on value
        over ids already yields that order, so every prefix is a valid subtree."""
        values = self.values[:, 1:]
        order = torch.sort(values, dim=1, descending=True, stable=True).indices
        return order + 1


@dataclass
class TreeStorage:
    """Room for ``capacity`` nodes per sequence: the ``[B, capacity]`` fields and the
    ``[B, capacity, capacity]`` ancestor matrix a `DraftTree`'s tensors are views of.
    Unwritten ancestor rows are False but for the diagonal (each node is its own
    ancestor), so writing a layer sets only its rows' columns of earlier nodes.  The
    root's parent (-1), value (1) and depth (0) are written once: layers never
    overwrite node 0."""

    tokens: torch.Tensor
    parents: torch.Tensor
    values: torch.Tensor
    depths: torch.Tensor
    ancestors: torch.Tensor

    @classmethod
    def allocate(cls, batch: int, capacity: int, device: torch.device) -> TreeStorage:
        storage = cls(tokens=torch.zeros((batch, capacity), dtype=torch.long, device=device),
                      parents=torch.zeros((batch, capacity), dtype=torch.long, device=device),
                      values=torch.zeros((batch, capacity), dtype=torch.float64, device=device),
                      depths=torch.zeros((batch, capacity), dtype=torch.long, device=device),
                      ancestors=torch.empty((batch, capacity, capacity), dtype=torch.bool, device=device))
        storage.parents[:, 0] = -1
        storage.values[:, 0] = 1.0
        storage.clear()
        return storage

    @classmethod
    def holding(cls, tree: DraftTree, capacity: int) -> TreeStorage:
        """Room for ``capacity`` nodes, holding a copy of ``tree``'s nodes."""
        storage = cls.allocate(tree.batch_size, capacity, tree.tokens.device)
        size = tree.size
        for name in ("tokens", "parents", "values", "depths"):
            getattr(storage, name)[:, :size] = getattr(tree, name)
        storage.ancestors[:, :size, :size] = tree.ancestors
        return storage

    @property
    def capacity(self) -> int:
        return int(self.tokens.shape[1])

    def fits(self, batch: int, capacity: int, device: torch.device) -> bool:
        """Can a tree of ``batch`` sequences and up to ``capacity`` nodes live here?"""
        return self.tokens.shape[0] == batch and self.capacity >= capacity and self.tokens.device == device

    def clear(self) -> None:
        """Forget every node but the roots: the ancestor matrix back to the identity
        (a layer writes only its rows' columns of earlier nodes, so an earlier tree's
        rows would otherwise show through)."""
        self.ancestors.zero_()
        self.ancestors.diagonal(dim1=1, dim2=2).fill_(True)

    def tree(self, size: int, layers: int) -> DraftTree:
        """The first ``size`` nodes as a `DraftTree` of views."""
        return DraftTree(self.tokens[:, :size], self.parents[:, :size], self.values[:, :size], self.depths[:, :size],
                         ancestors=self.ancestors[:, :size, :size], layers=layers, storage=self)


@dataclass
class VerifyTree:
    """The nodes one target forward verifies, root first, then the chosen nodes in
    rank order (parents before children).  ``parents`` index into this list."""

    node_ids: torch.Tensor  # [B, n] ids in the DraftTree
    tokens: torch.Tensor  # [B, n]
    parents: torch.Tensor  # [B, n] local index, -1 for the root
    depths: torch.Tensor  # [B, n]
    values: torch.Tensor  # [B, n]
    mask: torch.Tensor | None = None  # [B, n, n] ancestor-or-self; derived from parents if absent
    max_depth: int | None = None  # host bound on ``depths`` (the drafted layers); read back if absent

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[1])

    def rows(self, index: torch.Tensor) -> VerifyTree:
        """The trees of the sequences at ``index`` (a sub-batch)."""
        return VerifyTree(*(t.index_select(0, index) for t in (self.node_ids, self.tokens, self.parents,
                                                                self.depths, self.values, self.ancestor_mask())),
                          max_depth=self.max_depth)

    def ancestor_mask(self) -> torch.Tensor:
        """``mask[b, i, j]`` is True when node ``j`` is node ``i`` or one of its
        ancestors: exactly what tree attention lets token ``i`` see."""
        if self.mask is None:
            self.mask = ancestor_mask(self.parents)
        return self.mask

    def positions(self, context_lens: torch.Tensor) -> torch.Tensor:
        """Absolute positions: the root sits at the first free cache slot."""
        return context_lens.view(-1, 1) + self.depths


def select_verified(tree: DraftTree, num_nodes: int) -> VerifyTree:
    """Root plus each sequence's top-``num_nodes`` ranked nodes (a valid subtree)."""
    if not 0 <= num_nodes <= tree.size - 1:
        raise ValueError(f"num_nodes must be in [0, {tree.size - 1}], got {num_nodes}")
    batch = tree.batch_size
    root = torch.zeros((batch, 1), dtype=torch.long, device=tree.tokens.device)
    if num_nodes == 0:  # the root alone (plain decoding): views of the tree's first node
        return VerifyTree(node_ids=root, tokens=tree.tokens[:, :1], parents=tree.parents[:, :1],
                          depths=tree.depths[:, :1], values=tree.values[:, :1], mask=tree.ancestors[:, :1, :1],
                          max_depth=0)
    node_ids = torch.cat([root, tree.ranked_nodes()[:, :num_nodes]], dim=1)
    # Map each chosen node's parent id to its position in node_ids.
    local_of = torch.full((batch, tree.size), -1, dtype=torch.long, device=node_ids.device)
    local_of.scatter_(1, node_ids, torch.arange(node_ids.shape[1], device=node_ids.device).expand(batch, -1))
    parent_ids = tree.parents.gather(1, node_ids)
    # Every ranked prefix is a subtree (`DraftTree.ranked_nodes`), so every chosen node's
    # parent is chosen too (tests/test_tree_verify.py checks it; no host read here).
    parents = torch.where(parent_ids < 0, parent_ids, local_of.gather(1, parent_ids.clamp(min=0)))
    n = node_ids.shape[1]
    rows = tree.ancestors.gather(1, node_ids.unsqueeze(-1).expand(-1, -1, tree.size))
    return VerifyTree(
        node_ids=node_ids,
        tokens=tree.tokens.gather(1, node_ids),
        parents=parents,
        depths=tree.depths.gather(1, node_ids),
        values=tree.values.gather(1, node_ids),
        mask=rows.gather(2, node_ids.unsqueeze(1).expand(-1, n, -1)),
        max_depth=tree.layers,
    )


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """Ancestor-or-self mask ``[B, n, n]`` for local parent lists in which every
    parent precedes its child."""
    batch, n = parents.shape
    eye = torch.eye(n, dtype=torch.bool, device=parents.device)
    mask = eye.unsqueeze(0).repeat(batch, 1, 1)
    rows = torch.arange(batch, device=parents.device)
    for i in range(1, n):
        mask[:, i] |= mask[rows, parents[:, i].clamp(min=0)] & (parents[:, i] >= 0).view(-1, 1)
    return mask
