"""Draft-tree bookkeeping for a batch (docs/design/cast.md §4–§5).

Every sequence in a batch grows the same number of nodes per layer (one ``n_i`` for
the batch keeps arrays rectangular), so a batch of trees is a handful of ``[B, T]``
arrays.  Node 0 of every sequence is the root: the last committed token, value 1,
depth 0.  Nodes are appended layer by layer, so node ids are in creation order and
depth never decreases with id.

The tree lives on the host, in NumPy arrays.  Every decision made on it (which
children to keep, which nodes to verify) is the host's, and its bookkeeping is a few
dozen small array operations per layer: a NumPy operation on a few dozen numbers
costs 0.1–1 µs, a torch one 1–4 µs of dispatch on a CPU and a kernel launch on a GPU
(docs/benchmarks.md, "Host work between the forwards").  What a forward needs of the
tree (its tokens, positions and attention mask) is handed to the device as that
forward's input; what the draft proposes comes back in one copy per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


def node_slice(ids: range) -> slice:
    """Consecutive node ids as the slice that reads them from a ``[B, T, ...]`` field
    (a view, no gather)."""
    return slice(ids.start, ids.stop)


def host_ints(values) -> np.ndarray:
    """Token ids or node ids (a list, a host tensor or an array) as an int64 array."""
    return np.asarray(values, dtype=np.int64)


@dataclass
class TreeStorage:
    """Room for ``capacity`` nodes per sequence: the ``[B, capacity]`` arrays and the
    ``[B, capacity, capacity]`` ancestor matrix a `DraftTree` reads the first nodes
    of.  The root's parent (-1), value (1), depth (0) and ancestor row are written at
    allocation and never again: layers start at node 1.  A layer writes its nodes'
    whole rows up to its last node, so a later tree in the same room never sees an
    earlier tree's nodes (rows past a tree's size are never read)."""

    tokens: np.ndarray  # [B, C] int64
    parents: np.ndarray  # [B, C] int64, -1 for the root
    values: np.ndarray  # [B, C] float64
    depths: np.ndarray  # [B, C] int64
    ancestors: np.ndarray  # [B, C, C] bool: ancestors[b, i, j] is True when j is i or one of its ancestors
    rows: np.ndarray  # [B, 1] the batch index, for gathering one column per row

    @classmethod
    def allocate(cls, batch: int, capacity: int) -> TreeStorage:
        storage = cls(tokens=np.zeros((batch, capacity), dtype=np.int64),
                      parents=np.zeros((batch, capacity), dtype=np.int64),
                      values=np.zeros((batch, capacity), dtype=np.float64),
                      depths=np.zeros((batch, capacity), dtype=np.int64),
                      ancestors=np.zeros((batch, capacity, capacity), dtype=bool),
                      rows=np.arange(batch).reshape(batch, 1))
        storage.parents[:, 0] = -1
        storage.values[:, 0] = 1.0
        storage.ancestors[:, 0, 0] = True
        return storage

    @classmethod
    def holding(cls, tree: DraftTree, capacity: int) -> TreeStorage:
        """Room for ``capacity`` nodes, holding a copy of ``tree``'s nodes."""
        storage = cls.allocate(tree.batch_size, capacity)
        size = tree.size
        for name in ("tokens", "parents", "values", "depths"):
            getattr(storage, name)[:, :size] = getattr(tree, name)
        storage.ancestors[:, :size, :size] = tree.ancestors
        return storage

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]

    def fits(self, batch: int, capacity: int) -> bool:
        """Can a tree of ``batch`` sequences and up to ``capacity`` nodes live here?"""
        return self.tokens.shape[0] == batch and self.capacity >= capacity


@dataclass
class DraftTree:
    """A batch of draft trees: the first ``size`` nodes of ``storage``.  Its fields
    ``tokens``, ``parents`` (-1 for the root), ``values`` (product of draft
    probabilities along the path) and ``depths`` are ``[B, T]`` host arrays, and
    ``ancestors`` the ``[B, T, T]`` ancestor-or-self matrix, kept up to date layer by
    layer so that tree attention masks never need a walk over the nodes."""

    storage: TreeStorage = field(repr=False)
    size: int  # nodes per sequence, root included
    # Layers added since the root: a bound on every node's depth, known without a read.
    layers: int
    _ranked: np.ndarray | None = field(default=None, repr=False)  # `ranked_nodes`, until the next layer

    @classmethod
    def from_roots(cls, root_tokens, capacity: int = 1, room: TreeStorage | None = None) -> DraftTree:
        """Trees of the roots alone (``[B]`` token ids on the host), with room for
        ``capacity`` nodes per sequence (root included; more is allocated when a layer
        needs it).  ``room``, an earlier tree's storage, is written over when it fits
        (that tree is given up): an engine drafts a tree of the same batch and size
        every iteration."""
        roots = host_ints(root_tokens).reshape(-1)
        if room is None or not room.fits(len(roots), capacity):
            room = TreeStorage.allocate(len(roots), max(capacity, 1))
        room.tokens[:, 0] = roots
        return cls(room, size=1, layers=0)

    @classmethod
    def from_nodes(cls, tokens, parents, values) -> DraftTree:
        """A tree of given nodes (``[B, T]`` each, array-like; every parent before its
        child), such as a stored trace's; depths and ancestors are derived."""
        tokens, parents = host_ints(tokens), host_ints(parents)
        tree = cls.from_roots(tokens[:, 0], capacity=parents.shape[1])
        storage = tree.storage
        storage.tokens[:], storage.parents[:] = tokens, parents
        storage.values[:] = np.asarray(values, dtype=np.float64)
        storage.ancestors[:] = ancestor_matrix(parents)
        storage.depths[:] = storage.ancestors.sum(axis=2) - 1  # a node's ancestors, itself aside
        tree.size, tree.layers = parents.shape[1], int(storage.depths.max())
        return tree

    def copy(self) -> DraftTree:
        """A copy in storage of its own: an engine's tree lives one iteration (the next
        is written into its storage)."""
        return DraftTree(TreeStorage.holding(self, self.size), self.size, self.layers)

    @property
    def tokens(self) -> np.ndarray:
        return self.storage.tokens[:, : self.size]

    @property
    def parents(self) -> np.ndarray:
        return self.storage.parents[:, : self.size]

    @property
    def values(self) -> np.ndarray:
        return self.storage.values[:, : self.size]

    @property
    def depths(self) -> np.ndarray:
        return self.storage.depths[:, : self.size]

    @property
    def ancestors(self) -> np.ndarray:
        return self.storage.ancestors[:, : self.size, : self.size]

    @property
    def batch_size(self) -> int:
        return self.storage.tokens.shape[0]

    def add_layer(self, tokens, parents, values) -> range:
        """Append one layer (``[B, n]`` each, array-like; ``parents`` are node ids) and
        return the new node ids, the same in every sequence (the tree is rectangular)."""
        tokens, parents = host_ints(tokens), host_ints(parents)
        first, n = self.size, tokens.shape[1]
        end = first + n
        if self.storage.capacity < end:
            self.storage = TreeStorage.holding(self, max(end, 2 * first))
        storage, rows = self.storage, self.storage.rows
        storage.tokens[:, first:end] = tokens
        storage.parents[:, first:end] = parents
        storage.values[:, first:end] = values
        storage.depths[:, first:end] = storage.depths[rows, parents] + 1
        # A node's ancestors are its parent's and itself: its whole row up to ``end``.
        storage.ancestors[:, first:end, :first] = storage.ancestors[rows, parents, :first]
        storage.ancestors[:, first:end, first:end] = np.eye(n, dtype=bool)
        self.size, self.layers, self._ranked = end, self.layers + 1, None
        return range(first, end)

    def raise_value(self, row: int, node: int, value: float) -> None:
        """Value ``node`` of sequence ``row`` at least ``value`` (a second drafter
        proposed it too, `context_lookup`); the ranking is redone when it changes."""
        if value > self.storage.values[row, node]:
            self.storage.values[row, node] = value
            self._ranked = None

    def ranked_nodes(self) -> np.ndarray:
        """Non-root node ids per sequence, best first (``[B, T - 1]``): value
        descending, ties by smaller depth, then creation order (docs/design/cast.md
        §5).  Because a child's value never exceeds its parent's and ids grow with
        depth, a stable sort on value over ids already yields that order, so every
        prefix is a valid subtree.  Sorted once per tree: the rerank and the verified
        subtree both read it."""
        if self._ranked is None:
            self._ranked = (-self.values[:, 1:]).argsort(axis=1, kind="stable") + 1
        return self._ranked


@dataclass(frozen=True)
class VerifyTree:
    """The nodes one target forward verifies, root first, then the chosen nodes in
    rank order (parents before children).  ``parents`` index into this list.  Host
    tensors: an engine sends the forward's inputs (tokens, positions, mask) to its
    device, and verification reads the rest on the host."""

    node_ids: torch.Tensor  # [B, n] ids in the DraftTree
    tokens: torch.Tensor  # [B, n]
    parents: torch.Tensor  # [B, n] local index, -1 for the root
    depths: torch.Tensor  # [B, n]
    values: torch.Tensor  # [B, n]
    mask: torch.Tensor  # [B, n, n] ancestor-or-self: what tree attention lets token i see

    @classmethod
    def of_arrays(cls, node_ids: np.ndarray, tokens: np.ndarray, parents: np.ndarray, depths: np.ndarray,
                  values: np.ndarray, mask: np.ndarray) -> VerifyTree:
        """From host arrays (``[B, n]``; ``mask`` ``[B, n, n]``), shared, not copied."""
        return cls(node_ids=torch.from_numpy(node_ids), tokens=torch.from_numpy(tokens),
                   parents=torch.from_numpy(parents), depths=torch.from_numpy(depths),
                   values=torch.from_numpy(values), mask=torch.from_numpy(mask))

    @classmethod
    def of_roots(cls, roots) -> VerifyTree:
        """The roots alone (``[B]`` token ids): plain decoding's verified tree, without
        a draft tree to select it from.  Built in NumPy: every torch factory is a dispatch,
        each paid again after a forward (docs/results/2026-12-04_host_work_avx512.md)."""
        tokens = host_ints(roots).reshape(-1, 1)
        zeros = np.zeros_like(tokens)
        return cls.of_arrays(zeros, tokens, np.full_like(zeros, -1), zeros, np.ones(tokens.shape),
                             np.ones((len(tokens), 1, 1), dtype=bool))

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[1])

    def rows(self, index: list[int]) -> VerifyTree:
        """The trees of the sequences at ``index`` (a sub-batch)."""
        fields = (self.node_ids, self.tokens, self.parents, self.depths, self.values, self.mask)
        return VerifyTree.of_arrays(*(t.numpy()[index] for t in fields))

    def positions(self, context_lens: torch.Tensor) -> torch.Tensor:
        """Absolute positions ``[B, n]`` from the host's ``context_lens`` ``[B]``: the root
        sits at the first free cache slot (summed in numpy: the host tensors' views skip
        torch's dispatch)."""
        return torch.from_numpy(context_lens.numpy()[:, None] + self.depths.numpy())


def select_verified(tree: DraftTree, num_nodes: int) -> VerifyTree:
    """Root plus each sequence's top-``num_nodes`` ranked nodes (a valid subtree), as
    host tensors (an engine sends them to its device for the verify forward)."""
    if not 0 <= num_nodes <= tree.size - 1:
        raise ValueError(f"num_nodes must be in [0, {tree.size - 1}], got {num_nodes}")
    # Every ranked prefix is a subtree (`DraftTree.ranked_nodes`; tests/cast/test_tree_verify.py checks it).
    return verified_subtree(tree, tree.ranked_nodes()[:, :num_nodes])


def verified_subtree(tree: DraftTree, nodes: np.ndarray) -> VerifyTree:
    """The root plus ``nodes`` (``[B, n]`` node ids per sequence, each node's parent
    among the root and the nodes before it) as a `VerifyTree` in that order."""
    batch, count, rows = tree.batch_size, nodes.shape[1] + 1, tree.storage.rows
    node_ids = np.zeros((batch, count), dtype=np.int64)
    node_ids[:, 1:] = nodes
    # Map each chosen node's parent id to its position in node_ids.
    local_of = np.full((batch, tree.size), -1, dtype=np.int64)
    local_of[rows, node_ids] = np.arange(count)
    parent_ids = tree.parents[rows, node_ids]
    parents = np.where(parent_ids < 0, -1, local_of[rows, np.maximum(parent_ids, 0)])
    mask = tree.ancestors[rows[:, :, None], node_ids[:, :, None], node_ids[:, None, :]]  # [B, n, n]
    return VerifyTree.of_arrays(node_ids, tree.tokens[rows, node_ids], parents, tree.depths[rows, node_ids],
                                tree.values[rows, node_ids], mask)


def ancestor_matrix(parents: np.ndarray) -> np.ndarray:
    """Ancestor-or-self matrix ``[B, n, n]`` for parent lists ``[B, n]`` in which every
    parent precedes its child (-1 for the root): one walk over the nodes."""
    batch, n = parents.shape
    mask = np.zeros((batch, n, n), dtype=bool)
    mask[:, np.arange(n), np.arange(n)] = True
    rows = np.arange(batch)
    for i in range(1, n):
        mask[:, i] |= mask[rows, np.maximum(parents[:, i], 0)] & (parents[:, i] >= 0)[:, None]
    return mask
