"""The prompt-lookup branch (sglang_cast/cast/context_lookup.py): what it proposes, how
its tokens join a drafted tree, and that verification accepts them."""

import numpy as np
import pytest
import torch

from sglang_cast.cast import ContextLookup, DraftTree, graft_proposals, select_verified, verify_greedy


def test_it_proposes_what_followed_the_latest_earlier_occurrence_of_the_last_tokens():
    context = [5, 1, 2, 7, 8, 9, 4, 1, 2, 6, 6, 1, 2]
    assert ContextLookup(depth=3).propose(context) == [6, 6, 1]  # (1, 2) at 7, not at 1
    assert ContextLookup(depth=8).propose(context) == [6, 6, 1, 2]  # up to the context's end
    assert ContextLookup(ngram=1, depth=2).propose([4, 9, 9, 4]) == [9, 9]
    assert ContextLookup().propose([3, 4, 5, 6]) == []  # (5, 6) never occurred before
    assert ContextLookup(window=5).propose(context) == []  # the earlier (1, 2) lie outside the window


@pytest.mark.parametrize("field, value, message", [
    ("depth", 0, "ContextLookup.depth must be >= 1, got 0"),
    ("ngram", 0, "ContextLookup.ngram must be >= 1, got 0"),
    ("first_value", 1.5, r"ContextLookup.first_value must be in \(0, 1\], got 1.5"),
    ("next_value", 0.0, r"ContextLookup.next_value must be in \(0, 1\], got 0.0"),
])
def test_bad_settings_name_the_field_and_its_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        ContextLookup(**{field: value})


def _tree() -> DraftTree:
    """Row 0: root 10 with children 20 (0.6) and 30 (0.3), 20 with child 21 (0.2);
    row 1: root 11 with children 40, 41, 42."""
    return DraftTree.from_nodes(tokens=[[10, 20, 30, 21], [11, 40, 41, 42]], parents=[[-1, 0, 0, 1], [-1, 0, 0, 0]],
                                values=[[1.0, 0.6, 0.3, 0.2], [1.0, 0.5, 0.4, 0.1]])


def test_a_proposal_reuses_the_drafted_prefix_and_hangs_the_rest_under_it():
    tree = _tree()
    values = ContextLookup(first_value=0.75, next_value=0.9).values(4)
    graft_proposals(tree, [[20, 21, 22, 23], []], values)
    assert tree.size == 6
    assert tree.tokens[0].tolist() == [10, 20, 30, 21, 22, 23]
    assert tree.parents[0].tolist() == [-1, 0, 0, 1, 3, 4]  # no second child 20 under the root
    np.testing.assert_allclose(tree.values[0], [1.0, 0.75, 0.3, 0.675, 0.6075, 0.54675])
    assert tree.depths[0].tolist() == [0, 1, 1, 2, 3, 4]
    assert tree.parents[1, 4:].tolist() == [0, 0] and tree.values[1, 4:].tolist() == [0.0, 0.0]  # fillers
    ranked = tree.ranked_nodes()
    for b in range(2):  # every prefix of the ranking is a subtree: a parent before its child
        seen = {0}
        for node in ranked[b]:
            assert tree.parents[b, node] in seen
            seen.add(int(node))


def test_verification_accepts_the_grafted_path_when_the_target_agrees():
    tree = _tree()
    graft_proposals(tree, [[20, 21, 22, 23], [40, 43]], ContextLookup().values(4))
    vtree = select_verified(tree, tree.size - 1)
    following = {10: 20, 20: 21, 21: 22, 22: 23, 23: 99, 11: 40, 40: 43, 43: 98}
    argmax = torch.tensor([[following.get(t, 0) for t in row] for row in vtree.tokens.tolist()])
    result = verify_greedy(vtree, argmax)
    assert result.committed(vtree) == [[20, 21, 22, 23, 99], [40, 43, 98]]
