"""Our ``eagle2`` policy against an independent brute-force EAGLE-2: same verified
nodes, same order, on random draft distributions and on issue 29's tiny case."""

import random

import numpy as np
import pytest
import torch

from sglang_cast.cast import CostModel, PolicySettings, TreeShape, grow_tree, make_policy, select_verified
from support.synthetic import PathModel, path_of


def eagle2_reference(children, root: int, top_k: int, depth: int, num_verify: int):
    """EAGLE-2 written out on token paths.  ``children(path)`` lists the draft's
    ``(token, probability)`` pairs best first.  Each layer expands the best ``K``
    nodes of the previous layer (all ``K`` root children for layer 1); every child
    drafted joins the pool; the best ``m - 1`` of the pool are verified, ordered by
    value, then depth, then the order in which they were drafted.  Returns
    ``[(path, value)]`` in that order."""
    pool = []
    frontier = [((root,), 1.0)]
    for _ in range(depth):
        layer = [(path + (token,), value * p) for path, value in frontier for token, p in children(path)[:top_k]]
        pool += layer
        frontier = sorted(layer, key=lambda node: -node[1])[:top_k]  # stable: drafting order on ties
    order = sorted(range(len(pool)), key=lambda i: (-pool[i][1], len(pool[i][0]), i))
    return [pool[i] for i in order[: num_verify - 1]]


def ours(shape: TreeShape, expander, roots: torch.Tensor):
    policy = make_policy("eagle2", PolicySettings.single(CostModel.linear(1.0, 5.0, 0.3, 64), shape))
    plan = policy.begin(roots.numel(), 10)
    tree = grow_tree(plan, expander, roots)
    vtree = select_verified(tree, plan.verify_count(tree))
    return [[(path_of(tree, b, int(node)), float(value)) for node, value in zip(vtree.node_ids[b, 1:],
                                                                                  vtree.values[b, 1:])]
            for b in range(roots.numel())]


@pytest.mark.parametrize("seed", range(24))
def test_eagle2_verifies_what_brute_force_eagle2_verifies(seed):
    rng = random.Random(seed)
    top_k, depth = rng.randint(1, 4), rng.randint(1, 4)
    pool = TreeShape(top_k=top_k, max_depth=depth).pool_size
    shape = TreeShape(top_k=top_k, max_depth=depth, num_verify_tokens=rng.randint(2, pool + 3))
    model = PathModel(vocab=9, seed=seed)
    roots = torch.tensor([rng.randrange(9) for _ in range(rng.randint(1, 3))])

    def children(path):
        probs = model.draft_probs(path)
        top = torch.sort(probs, descending=True, stable=True)
        return list(zip(top.indices.tolist(), top.values.tolist()))

    got = ours(shape, model, roots)
    for b, root in enumerate(roots.tolist()):
        want = eagle2_reference(children, root, top_k, depth, shape.num_verify_tokens)
        assert [path for path, _ in got[b]] == [path for path, _ in want]
        assert [v for _, v in got[b]] == pytest.approx([v for _, v in want], rel=1e-12)


class ConstantChildren:
    """Every node's children: token 1 at 0.5, token 2 at 0.4."""

    def expand(self, tree, frontier, top_k):
        batch, n = tree.batch_size, len(frontier)
        probs = np.broadcast_to(np.array([0.5, 0.4])[:top_k], (batch, n, top_k))
        return probs, np.broadcast_to(np.array([1, 2])[:top_k], (batch, n, top_k))


def test_issue_29_tiny_case():
    """K=2, H=3, m=6: every layer-2 child stays in the pool, kept or not, so the
    fifth verified node is the second 0.2 of layer 2 (a leaf: layer 3 expands only
    0.25 and the first 0.2), not a layer-3 node worth 0.125."""
    got = ours(TreeShape(top_k=2, max_depth=3, num_verify_tokens=6), ConstantChildren(), torch.tensor([0]))[0]
    assert [v for _, v in got] == pytest.approx([0.5, 0.4, 0.25, 0.2, 0.2])
    assert [p for p, _ in got] == [(0, 1), (0, 2), (0, 1, 1), (0, 1, 2), (0, 2, 1)]
    want = eagle2_reference(lambda path: [(1, 0.5), (2, 0.4)], 0, 2, 3, 6)
    assert got == want
    assert TreeShape(top_k=10, max_depth=6).pool_size == 510  # EAGLE-2's default shape
