"""A deterministic stand-in for a draft and a target, defined on token paths.

Its draft distribution and target argmax depend only on the path from the root,
as in EAGLE, which is exactly the property trace replay relies on.  Used by the
core tests to compare live growth with replay without a neural model.
"""

from __future__ import annotations

import random

import torch

from sglang_cast.cast import DraftTree
from sglang_cast.cast.tree import ancestor_matrix


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """`ancestor_matrix` of a tensor of parents, on its device: the reference the tests
    check `VerifyTree.mask` against (the engine gathers it from the draft tree's)."""
    return torch.from_numpy(ancestor_matrix(parents.cpu().numpy())).to(parents.device)


def path_of(tree: DraftTree, b: int, node: int) -> tuple[int, ...]:
    path = []
    while node >= 0:
        path.append(int(tree.tokens[b, node]))
        node = int(tree.parents[b, node])
    return tuple(reversed(path))


class PathModel:
    def __init__(self, vocab: int = 12, seed: int = 0, agreement: float = 0.6) -> None:
        self.vocab = vocab
        self.seed = seed
        self.agreement = agreement  # chance the target agrees with the draft's favourite

    def _rng(self, path: tuple[int, ...], salt: int) -> random.Random:
        return random.Random(hash((self.seed, salt, path)))

    def draft_probs(self, path: tuple[int, ...]) -> torch.Tensor:
        rng = self._rng(path, 1)
        weights = torch.tensor([rng.random() ** 4 for _ in range(self.vocab)], dtype=torch.float64)
        return weights / weights.sum()

    def target_argmax(self, path: tuple[int, ...]) -> int:
        rng = self._rng(path, 2)
        if rng.random() < self.agreement:
            return int(torch.argmax(self.draft_probs(path)))
        return rng.randrange(self.vocab)

    def expand(self, tree: DraftTree, frontier: range, top_k: int):
        batch, n = tree.batch_size, len(frontier)
        probs = torch.zeros((batch, n, top_k), dtype=torch.float64)
        tokens = torch.zeros((batch, n, top_k), dtype=torch.long)
        for b in range(batch):
            for i in range(n):
                p = self.draft_probs(path_of(tree, b, frontier[i]))
                top = torch.sort(p, descending=True, stable=True)
                probs[b, i] = top.values[:top_k]
                tokens[b, i] = top.indices[:top_k]
        return probs.numpy(), tokens.numpy()  # host arrays, as an Expander hands them

    def argmax_for(self, tree: DraftTree, node_ids: torch.Tensor) -> torch.Tensor:
        return torch.tensor([[self.target_argmax(path_of(tree, b, int(i))) for i in row]
                             for b, row in enumerate(node_ids)], dtype=torch.long)


def random_tree(rng: random.Random, batch: int, size: int, vocab: int = 50) -> DraftTree:
    """Random batch of trees with parents before children, distinct sibling tokens
    and values that never grow along a path."""
    tree = DraftTree.from_roots(torch.tensor([rng.randrange(vocab) for _ in range(batch)]))
    for _ in range(size - 1):
        parents, tokens, values = [], [], []
        for b in range(batch):
            children: dict[int, set[int]] = {}
            for t, p in zip(tree.tokens[b].tolist(), tree.parents[b].tolist()):
                children.setdefault(p, set()).add(t)
            parent = rng.choice([p for p in range(tree.size) if len(children.get(p, ())) < vocab])
            token = rng.choice([t for t in range(vocab) if t not in children.get(parent, ())])
            parents.append(parent)
            tokens.append(token)
            values.append(float(tree.values[b, parent]) * rng.choice([1.0, 0.5, rng.random()]))
        tree.add_layer(torch.tensor(tokens).view(-1, 1), torch.tensor(parents).view(-1, 1),
                       torch.tensor(values, dtype=torch.float64).view(-1, 1))
    return tree


def root_to_leaf_paths(parents: torch.Tensor) -> torch.Tensor:
    """Paths from the root to every leaf, ``[B, max_leaves, max_depth + 1]``, -1 padded
    (leaves ordered by local index): the tree written out, for checking masks."""
    batch, n = parents.shape
    mask = ancestor_mask(parents)
    has_child = torch.zeros((batch, n), dtype=torch.bool, device=parents.device)
    valid_child = parents >= 0
    has_child.scatter_(1, parents.clamp(min=0), valid_child)
    leaves = [torch.nonzero(~has_child[b]).flatten() for b in range(batch)]
    depth = int(mask.sum(-1).max())
    out = torch.full((batch, max(len(x) for x in leaves), depth), -1, dtype=torch.long, device=parents.device)
    for b, leaf_ids in enumerate(leaves):
        for k, leaf in enumerate(leaf_ids.tolist()):
            path = torch.nonzero(mask[b, leaf]).flatten()  # ancestors are in index order
            out[b, k, : path.numel()] = path
    return out
